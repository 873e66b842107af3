"""/v2 POSTs sent by a browser on behalf of another site are refused before anything is read."""

from __future__ import annotations

import base64

import orjson
import pytest

from engine.frontend import V2App
from tests.engine.frontend.asgi_client import call
from tests.engine.frontend.test_v2_app import simple_request

CODE = base64.b64encode(b"import os\nos.mkdir('/tmp/infera-drive-by')\n").decode()
DRIVE_BY = orjson.dumps({"parameters": {"file:1/model.py": CODE, "config": '{"backend": "python"}'}})


async def test_a_drive_by_load_from_another_page_is_refused(v2_app, v2_server):
    """The attack: fetch(..., {mode: "no-cors", headers: {"Content-Type": "text/plain"}, body}) from any page."""
    headers = {"origin": "http://evil.example", "content-type": "text/plain;charset=UTF-8", "host": "127.0.0.1:8000"}
    answer = await call(v2_app, "POST", "/v2/repository/models/x/load", DRIVE_BY, headers)
    assert answer.status == 403 and "Origin 'http://evil.example' is not this server's origin" in answer.json()["error"]
    assert not v2_server.model_ready("x")


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
async def test_it_refuses_what_the_browser_says_comes_from_another_site(v2_app, site):
    for path, body in (("/v2/models/simple/infer", simple_request()), ("/v2/repository/models/simple/unload", b"")):
        answer = await call(v2_app, "POST", path, body, {"sec-fetch-site": site})
        assert answer.status == 403 and "cross-site request refused" in answer.json()["error"]


async def test_it_serves_its_own_pages_and_clients_that_send_no_origin(v2_app):
    same = {"origin": "http://127.0.0.1:8000", "host": "127.0.0.1:8000", "sec-fetch-site": "same-origin"}
    assert (await call(v2_app, "POST", "/v2/models/simple/infer", simple_request(), same)).status == 200
    assert (await call(v2_app, "POST", "/v2/models/simple/infer", simple_request())).status == 200  # tritonclient


async def test_it_serves_an_origin_the_operator_trusts(v2_server):
    app = V2App(v2_server, trusted_origins=("https://console.example.com",))
    headers = {"origin": "https://console.example.com", "host": "infera.internal:8000"}
    assert (await call(app, "POST", "/v2/models/simple/infer", simple_request(), headers)).status == 200


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=1"]
)
async def test_repository_changes_take_json_only(v2_app, content_type):
    answer = await call(v2_app, "POST", "/v2/repository/models/simple/load", b"{}", {"content-type": content_type})
    assert answer.status == 415 and "take a JSON body" in answer.json()["error"]
    ok = await call(v2_app, "POST", "/v2/repository/models/simple/load", b"{}", {"content-type": "application/json"})
    assert ok.status == 200
