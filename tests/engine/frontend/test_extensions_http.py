"""Triton's shared-memory, trace and logging endpoints over HTTP: truthful status, clear refusals, live logging."""

from __future__ import annotations

import logging

import orjson
import pytest

from engine.frontend import V2App
from tests.engine.frontend.asgi_client import call
from tests.engine.frontend.test_v2_app import simple_request


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


async def test_trace_settings_round_trip_and_a_trace_file_records_every_request_in_order(v2_server, tmp_path):
    import json

    from engine.monitoring.tracing import Tracer

    v2_server.tracer = Tracer(tmp_path)
    app = V2App(v2_server)
    assert (await call(app, "GET", "/v2/trace/setting")).json()["trace_level"] == ["OFF"]
    settings = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "log_frequency": "0", "trace_file": "simple.json"}
    updated = await call(app, "POST", "/v2/models/simple/trace/setting", orjson.dumps(settings))
    assert updated.status == 200 and updated.json()["trace_file"] == "simple.json"  # as it was set (issue 32)
    assert (await call(app, "GET", "/v2/models/simple/trace/setting")).json()["trace_level"] == ["TIMESTAMPS"]
    assert (await call(app, "GET", "/v2/trace/setting")).json()["trace_level"] == ["OFF"]  # only the model's
    for _ in range(5):
        assert (await call(app, "POST", "/v2/models/simple/infer", simple_request())).status == 200
    records = json.loads((tmp_path / "simple.json").read_text())
    traces = [r for r in records if "timestamps" in r]
    assert len(traces) == 5 and all(r["model_name"] == "simple" for r in records if "model_name" in r)
    order = [
        "REQUEST_START",
        "QUEUE_START",
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "COMPUTE_END",
        "REQUEST_END",
    ]
    for trace in traces:
        assert [t["name"] for t in trace["timestamps"]] == order
        times = [t["ns"] for t in trace["timestamps"]]
        assert times == sorted(times)


async def test_the_tensors_level_records_each_requests_inputs_and_outputs(v2_server, tmp_path):
    import json

    from engine.monitoring.tracing import Tracer

    v2_server.tracer = Tracer(tmp_path)
    app = V2App(v2_server)
    settings = {"trace_level": ["TIMESTAMPS", "TENSORS"], "trace_rate": "1", "trace_file": "tensors.json"}
    assert (await call(app, "POST", "/v2/trace/setting", orjson.dumps(settings))).json()["trace_level"] == [
        "TIMESTAMPS",
        "TENSORS",
    ]
    assert (await call(app, "POST", "/v2/models/simple/infer", simple_request())).status == 200
    records = json.loads((tmp_path / "tensors.json").read_text())
    tensors = {(r["activity"], r["tensor"]["name"]): r["tensor"] for r in records if "tensor" in r}
    assert set(tensors) == {
        ("TENSOR_QUEUE_INPUT", "INPUT0"),
        ("TENSOR_QUEUE_INPUT", "INPUT1"),
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT0"),
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT1"),
    }
    sent = [int(v) for v in tensors[("TENSOR_QUEUE_INPUT", "INPUT0")]["data"].split(",")]
    summed = [int(v) for v in tensors[("TENSOR_BACKEND_OUTPUT", "OUTPUT0")]["data"].split(",")]
    other = [int(v) for v in tensors[("TENSOR_QUEUE_INPUT", "INPUT1")]["data"].split(",")]
    assert summed == [a + b for a, b in zip(sent, other, strict=True)]
    assert tensors[("TENSOR_QUEUE_INPUT", "INPUT0")]["shape"] == "1,16"
    assert tensors[("TENSOR_QUEUE_INPUT", "INPUT0")]["dtype"] == "INT32"
    assert any("timestamps" in r for r in records)


async def test_trace_count_rate_and_frequency_bound_what_is_written(v2_server, tmp_path):
    from engine.monitoring.tracing import Tracer

    folder = tmp_path / "traces"
    folder.mkdir()
    v2_server.tracer = Tracer(folder)
    app = V2App(v2_server)
    settings = {"trace_level": ["TIMESTAMPS"], "trace_rate": "2", "trace_count": "2", "log_frequency": "1"}
    await call(app, "POST", "/v2/trace/setting", orjson.dumps({**settings, "trace_file": "t.json"}))
    for _ in range(8):
        await call(app, "POST", "/v2/models/simple/infer", simple_request())
    assert sorted(p.name for p in folder.iterdir()) == ["t.json.0", "t.json.1"]  # every 2nd, at most 2, one each


@pytest.mark.parametrize(
    ("setting", "status", "message"),
    [
        ({"trace_level": ["EVERYTHING"]}, 400, "trace_level must be a list of OFF, TIMESTAMPS, TENSORS"),
        ({"trace_file": "/etc/cron.d/evil"}, 400, "must be a file in the trace folder"),
        ({"trace_file": "../escape.json"}, 400, "must be a file in the trace folder"),
        ({"trace_rate": "0"}, 400, "must be at least 1"),
        ({"trace_mode": "opentelemetry"}, 501, "not supported"),
    ],
)
async def test_trace_settings_refuse_what_they_cannot_do_and_never_write_outside_their_folder(
    v2_server, tmp_path, setting, status, message
):
    from engine.monitoring.tracing import Tracer

    v2_server.tracer = Tracer(tmp_path)
    answer = await call(V2App(v2_server), "POST", "/v2/trace/setting", orjson.dumps(setting))
    assert answer.status == status and message in answer.json()["error"]


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
    from engine.serving.admission import Principal

    async def viewer(scope) -> Principal:
        return Principal("val", role="viewer", user_id=3)

    app = V2App(v2_server, authenticate=viewer)
    assert (await call(app, "GET", "/v2/logging")).status == 200
    refused = await call(app, "POST", "/v2/logging", orjson.dumps({"log_verbose_level": 1}))
    assert refused.status == 403
