"""An `llm` model whose forward fails on a real server: its requests in flight are answered with the error, new
ones are refused with 503 naming it, its version is UNAVAILABLE with the reason, other models keep serving, and a
load brings it back."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path

import pytest

from engine.llm.engine_loop import EngineFailed, EngineUnavailable, GenerationRequest
from engine.llm.sampling import SamplingParams
from engine.settings import EngineSettings
from tests.engine.llm.served import WAIT_S, serving
from tests.engine.llm.test_llm_backend import CONFIG
from tests.engine.model_factory import make_simple_onnx

pytestmark = pytest.mark.asyncio

SIMPLE_INFER = {
    "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
    ]
}


def repository(tmp_path: Path, tiny_llama_folder: Path) -> Path:
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.pbtxt").write_text(CONFIG)
    shutil.copytree(tiny_llama_folder, tmp_path / "tiny" / "1")
    make_simple_onnx(tmp_path, name="simple")
    return tmp_path


def inject_fault(backend) -> threading.Event:
    """The forward raises on the first step that runs two requests; steps before it wait (bounded) for the second
    request to be submitted, so both are in flight when it fails. Returns the event set at that submit."""
    engine, runner = backend.engine, backend.runner
    second = threading.Event()
    submitted = []
    real_submit, real_execute = engine.submit, runner.execute

    def submit(request):
        request_id = real_submit(request)
        submitted.append(request_id)
        if len(submitted) == 2:
            second.set()
        return request_id

    def execute(plan):
        if len(plan.chunks) >= 2:
            raise RuntimeError("injected fault")
        if submitted and len(plan.prefills) == 0:  # a decode of the first request: hold it until the second comes
            second.wait(WAIT_S)
        return real_execute(plan)

    engine.submit = submit
    runner.execute = execute
    return second


async def test_it_fails_its_own_requests_and_version_only_and_a_load_brings_it_back(tmp_path, tiny_llama_folder):
    repo = repository(tmp_path, tiny_llama_folder)
    async with serving(repo, EngineSettings(open_repository_control=True)) as served:
        backend = served.server.get_model("tiny").instances[0].backend
        eos = backend.tokenizer.eos_token_id
        never_eos = json.dumps({"logit_bias": {str(eos): -100}})
        second = inject_fault(backend)
        first_event = asyncio.Event()
        body = {"text_input": "the quick brown fox", "max_tokens": 32, "sampling_parameters": never_eos}
        streamed = asyncio.create_task(served.stream_events("tiny", body | {"stream": True}, first_event))
        async with asyncio.timeout(WAIT_S):
            await first_event.wait()
        whole = asyncio.create_task(served.generate("tiny", body))
        async with asyncio.timeout(WAIT_S):
            events, answer = await asyncio.gather(streamed, whole)
        assert second.is_set()
        assert "text_output" in events[0]
        assert "injected fault" in events[-1]["error"] and "tiny" in events[-1]["error"]
        assert answer.status_code == 500 and "injected fault" in answer.json()["error"]

        refused = await served.generate("tiny", {"text_input": "a paged cache keeps", "max_tokens": 4})
        assert refused.status_code == 503
        assert "'tiny'" in refused.json()["error"] and "injected fault" in refused.json()["error"]
        completion = await served.client.post("/v1/completions", json={"model": "tiny", "prompt": "a paged cache"})
        assert completion.status_code == 503 and "'tiny'" in completion.json()["error"]["message"]
        assert (await served.client.get("/v2/models/tiny/ready")).status_code == 400
        index = (await served.client.post("/v2/repository/index", json={})).json()
        (row,) = [r for r in index if r["name"] == "tiny"]
        assert row["state"] == "UNAVAILABLE" and "injected fault" in row["reason"]
        status = served.server.status("tiny").versions[1]
        assert status.state == "UNAVAILABLE" and "injected fault" in status.reason

        simple = await served.client.post("/v2/models/simple/infer", json=SIMPLE_INFER)
        assert simple.status_code == 200
        assert (await served.client.get("/v2/models/simple/ready")).status_code == 200

        assert (await served.client.post("/v2/repository/models/tiny/load", json={})).status_code == 200
        assert (await served.client.get("/v2/models/tiny/ready")).status_code == 200
        again = await served.generate("tiny", {"text_input": "a paged cache keeps", "max_tokens": 4})
        assert again.status_code == 200 and again.json()["completion_tokens"] == 4


async def test_it_refuses_a_request_submitted_after_an_out_of_memory_with_503(tmp_path, tiny_llama_folder):

    repo = repository(tmp_path, tiny_llama_folder)
    async with serving(repo) as served:
        backend = served.server.get_model("tiny").instances[0].backend
        backend.runner.execute = lambda plan: (_ for _ in ()).throw(MemoryError("no room for KV blocks"))
        failed = await served.generate("tiny", {"text_input": "the quick brown fox", "max_tokens": 4})
        assert failed.status_code == 500 and "MemoryError: no room for KV blocks" in failed.json()["error"]
        error = EngineUnavailable("model 'tiny' failed")
        assert error.status == 503 and isinstance(error, EngineFailed)
        with pytest.raises(EngineUnavailable, match="no room for KV blocks"):
            backend.engine.submit(_request())


def _request() -> GenerationRequest:
    return GenerationRequest([1, 2, 3], SamplingParams(max_tokens=2), lambda update: None)
