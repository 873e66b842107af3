"""Triton's shared-memory, trace and logging endpoints over HTTP: truthful status, clear refusals, live logging."""

from __future__ import annotations

import logging

import orjson
import pytest

from engine.frontend import V2App
from tests.engine.frontend.asgi_client import call


@pytest.mark.parametrize(
    ("kind", "status", "message"),
    [
        ("systemsharedmemory", 400, "Unable to open shared memory region: '/infera-no-such-key'"),
        ("cudasharedmemory", 501, "this server has no GPU; send the tensors in the request"),
    ],
)
async def test_shared_memory_status_and_refusals_name_the_problem(v2_app, kind, status, message):
    assert (await call(v2_app, "GET", f"/v2/{kind}/status")).json() == []
    missing = await call(v2_app, "GET", f"/v2/{kind}/region/input0/status")
    assert missing.status == 404 and "Unable to find" in missing.json()["error"]
    body = orjson.dumps({"key": "/infera-no-such-key", "offset": 0, "byte_size": 64, "raw_handle": {"b64": ""}})
    refused = await call(v2_app, "POST", f"/v2/{kind}/region/input0/register", body)
    assert refused.status == status and message in refused.json()["error"]
    assert (await call(v2_app, "POST", f"/v2/{kind}/region/input0/unregister")).status == 200
    assert (await call(v2_app, "POST", f"/v2/{kind}/unregister")).status == 200
    assert (await call(v2_app, "POST", "/v2/models/simple/infer", b"{}")).status == 400  # the server goes on


async def test_trace_settings_read_off_and_refuse_being_turned_on(v2_app):
    settings = (await call(v2_app, "GET", "/v2/trace/setting")).json()
    assert settings["trace_level"] == ["OFF"] and settings["trace_rate"] == "1000"
    assert (await call(v2_app, "GET", "/v2/models/simple/trace/setting")).status == 200
    off = await call(v2_app, "POST", "/v2/trace/setting", orjson.dumps({"trace_level": ["OFF"]}))
    assert off.status == 200
    on = await call(v2_app, "POST", "/v2/trace/setting", orjson.dumps({"trace_level": ["TIMESTAMPS"]}))
    assert on.status == 501 and "tracing is not supported" in on.json()["error"]


async def test_logging_settings_change_the_servers_loggers_live(v2_app, v2_server):
    assert (await call(v2_app, "GET", "/v2/logging")).json()["log_verbose_level"] == 0
    changed = await call(v2_app, "POST", "/v2/logging", orjson.dumps({"log_verbose_level": 1, "log_info": True}))
    assert changed.status == 200 and changed.json()["log_verbose_level"] == 1
    assert logging.getLogger("engine").getEffectiveLevel() == logging.DEBUG
    bad = await call(v2_app, "POST", "/v2/logging", orjson.dumps({"log_verbose_level": -1}))
    assert bad.status == 400 and "non-negative integer" in bad.json()["error"]
    await call(v2_app, "POST", "/v2/logging", orjson.dumps({"log_verbose_level": 0}))
    assert logging.getLogger("engine").getEffectiveLevel() == logging.INFO


async def test_only_callers_who_may_change_models_change_logging(v2_server):
    from engine.admission import Principal

    async def viewer(scope) -> Principal:
        return Principal("val", role="viewer", user_id=3)

    app = V2App(v2_server, authenticate=viewer)
    assert (await call(app, "GET", "/v2/logging")).status == 200
    refused = await call(app, "POST", "/v2/logging", orjson.dumps({"log_verbose_level": 1}))
    assert refused.status == 403
