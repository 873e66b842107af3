"""V2App in process: routing, errors, limits, authentication and inference on a real model."""

from __future__ import annotations

import asyncio
import gzip

import numpy as np
import orjson
import pytest

from engine.errors import InferaError, Unauthorized
from engine.frontend import V2App
from engine.serving.admission import Principal
from tests.engine.frontend.asgi_client import call
from tests.engine.frontend.conftest import APP_BODY_LIMIT


def simple_request(batch: int = 1, **extra) -> bytes:
    a = list(range(16 * batch))
    return orjson.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "datatype": "INT32", "shape": [batch, 16], "data": a},
                {"name": "INPUT1", "datatype": "INT32", "shape": [batch, 16], "data": [1] * 16 * batch},
            ],
            **extra,
        }
    )


async def test_it_answers_health_and_server_metadata(v2_app):
    assert (await call(v2_app, "GET", "/v2/health/live")).status == 200
    ready = await call(v2_app, "GET", "/v2/health/ready")
    assert ready.status == 200 and ready.body == b""
    metadata = (await call(v2_app, "GET", "/v2")).json()
    assert metadata["name"] == "infera" and "binary_tensor_data" in metadata["extensions"]


async def test_it_answers_health_ready_400_with_an_empty_body_when_not_ready(v2_server):
    await v2_server.stop()
    answer = await call(V2App(v2_server), "GET", "/v2/health/ready")
    assert answer.status == 400 and answer.body == b""


async def test_it_runs_inference_and_echoes_the_request_id(v2_app):
    answer = await call(v2_app, "POST", "/v2/models/simple/infer", simple_request(id="abc"))
    assert answer.status == 200, answer.body
    document = answer.json()
    assert document["id"] == "abc" and document["model_version"] == "1"
    assert document["outputs"][0]["data"] == list(range(1, 17))


async def test_it_answers_unknown_paths_404_and_wrong_methods_405(v2_app):
    missing = await call(v2_app, "GET", "/v2/nothing/here")
    assert missing.status == 404 and missing.json() == {"error": "Not Found"}
    wrong = await call(v2_app, "GET", "/v2/models/simple/infer")
    assert wrong.status == 405 and wrong.headers["allow"] == "POST"
    assert "method GET is not allowed" in wrong.json()["error"]


async def test_it_names_unknown_models_and_refuses_non_numeric_versions(v2_app):
    unknown = await call(v2_app, "POST", "/v2/models/nope/infer", simple_request())
    assert unknown.status == 400
    assert unknown.json() == {"error": "Request for unknown model: 'nope' is not found"}
    version = await call(v2_app, "GET", "/v2/models/simple/versions/abc")
    assert version.status == 400 and "'abc' is not a positive integer" in version.json()["error"]
    absent = await call(v2_app, "GET", "/v2/models/simple/versions/7/config")
    assert absent.status == 400 and "'simple' version 7 is not found" in absent.json()["error"]


async def test_it_refuses_a_declared_body_over_the_limit_before_reading_it(v2_app):
    headers = {"content-length": str(APP_BODY_LIMIT + 1)}
    answer = await call(v2_app, "POST", "/v2/models/simple/infer", b"", headers=headers)
    assert answer.status == 413 and f"limit of {APP_BODY_LIMIT} bytes" in answer.json()["error"]


async def test_it_refuses_a_streamed_body_over_the_limit(v2_app):
    chunks = [b"x" * 40_000, b"x" * 40_000]
    answer = await call(v2_app, "POST", "/v2/models/simple/infer", chunks=chunks)
    assert answer.status == 413


async def test_it_reads_a_body_sent_in_chunks(v2_app):
    body = simple_request()
    answer = await call(v2_app, "POST", "/v2/models/simple/infer", chunks=[body[:10], body[10:50], body[50:]])
    assert answer.status == 200


async def test_it_refuses_a_gzip_bomb_past_the_limit(v2_app):
    bomb = gzip.compress(b" " * (APP_BODY_LIMIT * 4))
    answer = await call(v2_app, "POST", "/v2/models/simple/infer", bomb, headers={"content-encoding": "gzip"})
    assert answer.status == 413 and "decompressed" in answer.json()["error"]


async def test_it_answers_a_full_queue_with_503_and_retry_after(v2_app):
    body = simple_request()
    # one instance and a queue of one: of four requests sent at once, at most two can be taken
    answers = await asyncio.gather(*(call(v2_app, "POST", "/v2/models/tiny_queue/infer", body) for _ in range(4)))
    statuses = [a.status for a in answers]
    assert statuses[0] == 200 and statuses[-1] == 503 and set(statuses) == {200, 503}
    rejected = next(a for a in answers if a.status == 503)
    assert rejected.headers["retry-after"] == "1"
    assert rejected.json()["error"].startswith("Exceeds maximum queue size: model 'tiny_queue' already has 1 request")
    assert (await call(v2_app, "POST", "/v2/models/simple/infer", body)).status == 200


async def test_it_asks_authenticate_except_for_health(v2_server):
    seen: list[str] = []

    async def authenticate(scope) -> Principal:
        seen.append(scope["path"])
        if dict(scope["headers"]).get(b"authorization") != b"Bearer good":
            raise Unauthorized("authentication required: send 'Authorization: Bearer <token>'")
        return Principal("good", user_id=1)

    app = V2App(v2_server, authenticate=authenticate)
    assert (await call(app, "GET", "/v2/health/ready")).status == 200
    assert (await call(app, "GET", "/v2/health/live")).status == 200
    refused = await call(app, "POST", "/v2/models/simple/infer", simple_request())
    assert refused.status == 401 and "authentication required" in refused.json()["error"]
    assert refused.headers["www-authenticate"].startswith("Bearer")
    allowed = await call(app, "POST", "/v2/models/simple/infer", simple_request(), {"authorization": "Bearer good"})
    assert allowed.status == 200
    assert seen == ["/v2/models/simple/infer", "/v2/models/simple/infer"]


async def test_it_answers_with_the_status_an_authenticate_error_carries(v2_server):
    class Throttled(InferaError):
        status = 429

    async def expired(scope) -> bool:
        raise Unauthorized("token expired")

    async def throttled(scope) -> bool:
        raise Throttled("slow down")

    expired_answer = await call(V2App(v2_server, authenticate=expired), "GET", "/v2")
    assert expired_answer.status == 401 and expired_answer.json() == {"error": "token expired"}
    assert (await call(V2App(v2_server, authenticate=throttled), "GET", "/v2")).status == 429


async def test_it_answers_an_unexpected_exception_with_500_and_keeps_serving(v2_server, v2_app, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("stats store on fire")

    monkeypatch.setattr(v2_server, "statistics", broken)
    answer = await call(v2_app, "GET", "/v2/models/stats")
    assert answer.status == 500 and "RuntimeError: stats store on fire" in answer.json()["error"]
    assert (await call(v2_app, "POST", "/v2/models/simple/infer", simple_request())).status == 200


async def test_it_acknowledges_lifespan_without_starting_anything(v2_app):
    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent = []

    async def receive():
        return messages.pop(0)

    async def send(message):
        sent.append(message["type"])

    await v2_app({"type": "lifespan"}, receive, send)
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v2/repository/index", b"", 200),
        ("/v2/repository/index", b'{"ready": true}', 200),
        ("/v2/repository/index", b'{"ready": 1}', 400),
        ("/v2/repository/index", b"[1]", 400),
        ("/v2/repository/models/simple/load", b'{"parameters": {"file:1/model.onnx": "%%%"}}', 400),
        ("/v2/repository/models/simple/load", b'{"parameters": {"config": 5}}', 400),
        ("/v2/repository/models/simple/load", b'{"parameters": []}', 400),
        ("/v2/repository/models/nope/load", b"", 400),
        ("/v2/repository/models/nope/unload", b"", 400),
    ],
)
async def test_it_validates_repository_requests(v2_app, path, body, status):
    answer = await call(v2_app, "POST", path, body)
    assert answer.status == status, answer.body
    if status == 400:
        assert answer.json()["error"]


async def test_it_refuses_an_infer_with_binary_data_beyond_the_body(v2_app):
    header = orjson.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}}]}
    )
    answer = await call(
        v2_app,
        "POST",
        "/v2/models/simple/infer",
        header + b"\x00" * 8,
        {"inference-header-content-length": str(len(header))},
    )
    assert answer.status == 400 and "binary_data_size 64 but only 8 bytes" in answer.json()["error"]
    np.testing.assert_equal((await call(v2_app, "POST", "/v2/models/simple/infer", simple_request())).status, 200)


class RecordingControl:
    """A repository owner that claims one model and leaves the rest to the engine."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def load(self, name, *, config=None, files=None, caller=None) -> bool:
        self.calls.append(("load", name))
        return name == "claimed"

    async def unload(self, name, *, caller=None) -> bool:
        self.calls.append(("unload", name))
        return name == "claimed"


async def test_it_sends_repository_load_and_unload_to_the_owner_of_the_desired_state_first(v2_server):
    control = RecordingControl()
    app = V2App(v2_server, repository_control=control)
    assert (await call(app, "POST", "/v2/repository/models/claimed/load")).status == 200
    assert (await call(app, "POST", "/v2/repository/models/claimed/unload")).status == 200
    assert (await call(app, "POST", "/v2/repository/models/simple/unload")).status == 200
    assert not v2_server.model_ready("simple")  # not claimed: the engine unloaded it itself
    assert control.calls == [("load", "claimed"), ("unload", "claimed"), ("unload", "simple")]


async def test_it_counts_a_request_refused_before_queueing_as_a_failure(v2_server):
    app = V2App(v2_server)
    before = v2_server.statistics("simple")["model_stats"][0]["inference_stats"]["fail"]["count"]
    bad = orjson.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [0.0] * 16}]})
    assert (await call(app, "POST", "/v2/models/simple/infer", bad)).status == 400
    after = v2_server.statistics("simple")["model_stats"][0]["inference_stats"]["fail"]["count"]
    assert after == before + 1
