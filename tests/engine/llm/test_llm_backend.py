"""The `llm` backend served by the engine: a tiny random Llama (a Hugging Face folder) in a model repository."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from engine.errors import InvalidArgument
from engine.frontend.generate import answer_once, generate_request
from engine.serving.admission import Principal, admit, code_reason
from engine.serving.server import InferenceServer
from engine.serving.streams import ResponseStream
from engine.settings import EngineSettings
from engine.types import InferenceRequest

pytestmark = pytest.mark.asyncio(loop_scope="module")

CONFIG = """\
name: "tiny"
backend: "llm"
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "max_model_len" value: { string_value: "128" } }
parameters { key: "kv_block_size" value: { string_value: "4" } }
parameters { key: "kv_num_blocks" value: { string_value: "96" } }
parameters { key: "dtype" value: { string_value: "float32" } }
"""


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def server(tiny_llama_folder: Path, tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("llm_repo")
    (repo / "tiny").mkdir()
    (repo / "tiny" / "config.pbtxt").write_text(CONFIG)
    shutil.copytree(tiny_llama_folder, repo / "tiny" / "1")
    engine = InferenceServer(repo, gpu_count=0, settings=EngineSettings())
    await engine.start(load_models=True)
    try:
        yield engine
    finally:
        await engine.stop()


def text_request(prompt: str, **inputs: object) -> InferenceRequest:
    arrays = {"text_input": np.array([prompt.encode()], dtype=np.object_)}
    for name, value in inputs.items():
        if name == "stream":
            arrays[name] = np.array([value], dtype=np.bool_)
        elif isinstance(value, str):
            arrays[name] = np.array([value.encode()], dtype=np.object_)
        else:
            arrays[name] = np.array([value], dtype=np.float32 if isinstance(value, float) else np.int32)
    return InferenceRequest("tiny", arrays, batch_size=1)


async def collect(stream: ResponseStream) -> list:
    return [response async for response in stream if not response.empty]


def text_of(responses: list) -> str:
    return "".join(r.outputs["text_output"][0].decode() for r in responses)


async def test_its_config_is_completed_as_a_decoupled_text_generator_that_runs_no_code(server):
    config = server.get_model("tiny").config
    assert config.decoupled
    assert config.parameters["openai_text_input"] == "text_input"
    assert config.parameters["openai_text_output"] == "text_output"
    assert {t.name for t in config.output} >= {"text_output", "finish_reason", "cached_tokens"}
    assert code_reason(config) is None


async def test_it_answers_a_generate_request_with_the_whole_text_and_its_counts(server):
    config = server.get_model("tiny").config
    body = json.dumps({"text_input": "the quick brown fox", "max_tokens": 6, "temperature": 0}).encode()
    request = generate_request(body, config, "tiny", None, 1 << 20)
    answer = json.loads(await answer_once(await server.infer_stream(request), "tiny", request))
    assert isinstance(answer["text_output"], str) and answer["text_output"]
    assert answer["finish_reason"] == "length"
    assert answer["completion_tokens"] == 6
    assert answer["prompt_tokens"] > 0


async def test_a_stream_sends_a_response_per_token_with_the_same_text(server):
    whole = await collect(await server.infer_stream(text_request("a paged cache", max_tokens=8, temperature=0.0)))
    pieces = await collect(
        await server.infer_stream(text_request("a paged cache", max_tokens=8, temperature=0.0, stream=True))
    )
    assert len(whole) == 1 and len(pieces) == 8
    assert text_of(pieces) == text_of(whole)
    assert pieces[-1].outputs["completion_tokens"][0] == 8


async def test_messages_go_through_the_chat_template(server):
    messages = json.dumps([{"role": "user", "content": "what is the capital of france?"}])
    request = text_request("", max_tokens=4, temperature=0.0)
    del request.inputs["text_input"]
    request.inputs["messages"] = np.array([messages.encode()], dtype=np.object_)
    responses = await collect(await server.infer_stream(request))
    assert responses[-1].outputs["prompt_tokens"][0] > 8  # the template's markers around the question


async def test_a_cancelled_stream_frees_its_blocks(server):
    stream = await server.infer_stream(text_request("tokens stream", max_tokens=100, temperature=0.0, stream=True))
    first = await anext(aiter(stream))
    assert first.outputs is not None
    stream.cancel()
    async for _ in stream:
        pass
    engine = server.get_model("tiny").instances[0].backend.engine
    assert stream.times.cancelled
    assert engine.scheduler.blocks.usage == 0.0


async def test_a_bad_sampling_parameter_is_refused_naming_it(server):
    request = text_request("the", sampling_parameters=json.dumps({"top_p": 7}))
    with pytest.raises(InvalidArgument, match="top_p"):
        await server.infer_stream(request)


async def test_a_prompt_over_max_model_len_is_refused_with_400(server):
    with pytest.raises(InvalidArgument, match="max_model_len 128"):
        await server.infer_stream(text_request("the quick brown fox " * 60))


async def test_an_operator_may_upload_it_and_it_is_trial_loaded_in_the_sandbox(tiny_llama_folder, tmp_path):
    version = tmp_path / "uploaded" / "1"
    shutil.copytree(tiny_llama_folder, version)
    operator = Principal("operator", may_change_models=True, user_id=7, role="operator")
    settings = EngineSettings()
    assert settings.sandbox.enabled
    config = await asyncio.to_thread(
        admit, "uploaded", version, None, caller=operator, settings=settings, override={"backend": "llm"}
    )
    assert config.backend == "llm" and config.decoupled
    assert config.parameters["openai_messages_input"] == "messages"
