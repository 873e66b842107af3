"""Issue 32: tracing holds and writes a bounded amount, off the loop: traces appended to their file (never rewritten),
nothing kept once written, a writer that is behind drops and counts rather than blocking, tensors cut to a budget,
files 0600; a trace_file setting is a bounded, printable name, refused with 400 (INVALID_ARGUMENT), read back as set."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import threading
import weakref

import grpc
import numpy as np
import orjson
import pytest
from tritonclient.grpc import service_pb2

from engine.frontend import V2App
from engine.frontend.grpc_server import GrpcFrontEnd
from engine.monitoring import tracing
from engine.monitoring.tracing import Tracer
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings, GrpcSettings
from tests.engine.frontend.asgi_client import call
from tests.engine.frontend.server_process import running_server
from tests.engine.frontend.test_v2_app import simple_request
from tests.engine.model_factory import make_simple_onnx
from tests.engine.security.test_openai_bounds import post

TIMESTAMPS = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "log_frequency": "0", "trace_file": "t.json"}


async def traced(tracer: Tracer, model: str = "simple", tensors: dict | None = None) -> weakref.ref:
    """Trace one request through `tracer` as the front ends do; a weak reference to its trace."""
    trace = tracer.start(model, 1)
    assert trace is not None
    trace.mark("REQUEST_START")
    trace.record_tensors("TENSOR_QUEUE_INPUT", tensors or {})
    trace.mark("REQUEST_END")
    await tracer.finish(trace)
    return weakref.ref(trace)


def records(path) -> list[dict]:
    return json.loads(path.read_bytes())


async def test_it_appends_to_the_trace_file_and_never_rewrites_it(tmp_path):
    """The attack's cost: with log_frequency 0 every trace rewrote the whole file (a new file replaced it each time)."""
    tracer = Tracer(tmp_path)
    tracer.update(TIMESTAMPS)
    await traced(tracer)
    path = tmp_path / "t.json"
    with path.open("rb") as held:  # the file as first written: a rewrite would leave this one behind
        first = held.read()
        for _ in range(4):
            await traced(tracer)
        held.seek(0)
        assert held.read() == path.read_bytes() and path.read_bytes().startswith(first[:-1])
    assert len([r for r in records(path) if "timestamps" in r]) == 5  # one JSON array, valid after every write


async def test_it_keeps_no_written_trace_in_memory(tmp_path):
    """The attack: 30 TENSORS traces with log_frequency 0 kept every trace in memory for good (RSS +313 MB)."""
    tracer = Tracer(tmp_path)
    tracer.update({**TIMESTAMPS, "trace_level": ["TENSORS"]})
    kept = [await traced(tracer, tensors={"X": np.ones(1024, np.float32)}) for _ in range(30)]
    gc.collect()
    assert [ref() for ref in kept] == [None] * 30
    assert len([r for r in records(tmp_path / "t.json") if "tensor" in r]) == 30


async def test_a_writer_that_is_behind_drops_and_counts_and_never_blocks_the_loop(tmp_path, monkeypatch):
    """The attack: the file was written under the lock the loop takes per request (another caller waited 2.1 s)."""
    stuck, entered = threading.Event(), threading.Event()
    write = tracing._append

    def slow_append(*args):
        entered.set()
        stuck.wait()
        write(*args)

    monkeypatch.setattr(tracing, "_append", slow_append)
    tracer = Tracer(tmp_path, queue_traces=2)
    tracer.update(TIMESTAMPS)
    first = asyncio.create_task(traced(tracer))
    assert await asyncio.to_thread(entered.wait, 60)  # the writer holds the first trace, in its write
    queued = [asyncio.create_task(traced(tracer)) for _ in range(2)]  # the queue's two places
    await asyncio.sleep(0)
    for _ in range(3):  # past the queue: dropped, and finished at once
        await traced(tracer)
    assert tracer.dropped == 3
    assert tracer.start("simple", 1) is not None  # the loop's side of tracing is free while the writer writes
    stuck.set()
    await asyncio.gather(first, *queued)
    assert len([r for r in records(tmp_path / "t.json") if "timestamps" in r]) == 3


async def test_a_traces_tensors_are_cut_to_its_budget(tmp_path):
    tracer = Tracer(tmp_path, tensor_bytes=1024)
    tracer.update({**TIMESTAMPS, "trace_level": ["TENSORS"]})
    big = np.arange(1_000_000, dtype=np.int32).reshape(1000, 1000)
    words = np.array([b"x" * 100] * 50, dtype=np.object_)
    await traced(tracer, tensors={"BIG": big, "WORDS": words, "AFTER": np.ones(4, np.int64)})
    tensors = {r["tensor"]["name"]: r["tensor"] for r in records(tmp_path / "t.json") if "tensor" in r}
    assert tensors["BIG"]["data"].split(",") == [str(v) for v in range(256)] and tensors["BIG"]["truncated"]
    assert tensors["BIG"]["shape"] == "1000,1000" and tensors["BIG"]["dtype"] == "INT32"
    assert tensors["WORDS"]["data"] == "" and tensors["AFTER"]["data"] == "" and tensors["AFTER"]["truncated"]


async def test_trace_files_are_readable_by_the_server_only(tmp_path):
    """The attack: trace files holding other callers' tensors were created 0644."""
    old = tmp_path / "old.json"
    old.write_text("[]")
    old.chmod(0o644)
    tracer = Tracer(tmp_path)
    tracer.update({**TIMESTAMPS, "trace_file": "old.json"})
    await traced(tracer)
    tracer.update({"trace_file": "numbered.json", "log_frequency": "1"})
    await traced(tracer)
    await traced(tracer)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["numbered.json.0", "numbered.json.1", "old.json"]
    assert {oct(os.stat(tmp_path / name).st_mode & 0o777) for name in names} == {oct(0o600)}


@pytest.fixture
async def server(tmp_path):
    repo = tmp_path / "repo"
    make_simple_onnx(repo)
    settings = EngineSettings(open_repository_control=True, trace_dir=tmp_path / "traces")
    server = InferenceServer(repo, gpu_count=0, settings=settings)
    await server.start()
    yield server
    await server.stop()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("a\x00b.json", "control character"),
        ("line\nbreak.json", "control character"),
        ("n" * 5000, "at most 255 characters"),
        ("d/" * 128 + "x", "at most 255 characters"),
        ({"a": 1}, "takes a string or a number"),
    ],
)
async def test_a_bad_trace_file_name_is_refused_with_400(server, name, message):
    """The attack: a NUL in trace_file answered 500 and a 5,000-character name was accepted."""
    answer = await call(V2App(server), "POST", "/v2/trace/setting", orjson.dumps({"trace_file": name}))
    assert answer.status == 400 and message in answer.json()["error"]
    assert (await call(V2App(server), "GET", "/v2/trace/setting")).json()["trace_file"] == ""


async def test_the_trace_file_reads_back_as_it_was_set(server):
    """The attack: GET /v2/trace/setting showed the server's absolute path of the trace folder."""
    app = V2App(server)
    settings = {**TIMESTAMPS, "trace_file": "logs/simple.json"}
    assert (await call(app, "POST", "/v2/trace/setting", orjson.dumps(settings))).json()["trace_file"] == settings[
        "trace_file"
    ]
    assert (await call(app, "GET", "/v2/trace/setting")).json()["trace_file"] == "logs/simple.json"
    await traced(server.tracer)  # written where the name points, in the trace folder
    assert len(records(server.settings.trace_dir / "logs" / "simple.json")) == 2


async def test_grpc_refuses_a_nul_in_trace_file_with_invalid_argument(server):
    front_end = GrpcFrontEnd(server, GrpcSettings(port=0, shutdown_grace_seconds=1))
    await front_end.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{front_end.port}") as channel:
            trace_setting = channel.unary_unary(
                "/inference.GRPCInferenceService/TraceSetting",
                request_serializer=service_pb2.TraceSettingRequest.SerializeToString,
                response_deserializer=service_pb2.TraceSettingResponse.FromString,
            )
            request = service_pb2.TraceSettingRequest()
            request.settings["trace_file"].value.append("a\x00b")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await trace_setting(request)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "control character" in refused.value.details()
            answer = await trace_setting(service_pb2.TraceSettingRequest())
            assert list(answer.settings["trace_file"].value) == [""]
    finally:
        await front_end.stop()


@pytest.mark.server
def test_a_real_server_appends_tensor_traces_to_a_private_file(tmp_path):
    """The attack replayed through uvicorn: TENSORS, log_frequency 0, 30 requests; then a NUL in the name."""
    repo = tmp_path / "repo"
    make_simple_onnx(repo)
    folder = tmp_path / "traces"
    with running_server("uvicorn", repo, tmp_path / "uvicorn.log", {"INFERA_TRACE_DIR": str(folder)}) as address:
        settings = {**TIMESTAMPS, "trace_level": ["TIMESTAMPS", "TENSORS"], "trace_file": "tensors.json"}
        status, answer = post(address, "/v2/trace/setting", orjson.dumps(settings))
        assert status == 200 and answer["trace_file"] == "tensors.json"
        for _ in range(30):
            assert post(address, "/v2/models/simple/infer", simple_request())[0] == 200
        traces = records(folder / "tensors.json")
        assert len([r for r in traces if "timestamps" in r]) == 30
        assert len([r for r in traces if "tensor" in r]) == 30 * 4
        assert os.stat(folder / "tensors.json").st_mode & 0o777 == 0o600
        status, answer = post(address, "/v2/trace/setting", orjson.dumps({"trace_file": "x\x00y"}))
        assert status == 400 and "control character" in answer["error"]
