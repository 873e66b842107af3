"""Decoupled models in the engine: 0..N responses per request from the model's own threads, errors as responses,
cancellation the model sees, statistics done at the final response, and /infer refused."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import DecoupledOnly
from engine.serving.server import InferenceServer
from engine.serving.streams import ResponseStream
from engine.settings import EngineSettings
from engine.types import InferenceRequest
from tests.engine.decoupled_models import build_decoupled_repository

MODELS = ["repeat", "repeat_in_process"]


@pytest.fixture
async def server(tmp_path):
    engine = InferenceServer(build_decoupled_repository(tmp_path / "repo"), gpu_count=0, settings=EngineSettings())
    await engine.start(load_models=True)
    try:
        yield engine
    finally:
        await engine.stop()


def request(model: str, values: list[int], **parameters) -> InferenceRequest:
    return InferenceRequest(model, {"IN": np.array(values, dtype=np.int32)}, parameters=parameters)


async def collect(stream: ResponseStream) -> list:
    return [response async for response in stream]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("count", [0, 1, 5])
async def test_it_streams_every_response_then_the_final_flag(server, model, count):
    stream = await server.infer_stream(request(model, list(range(10, 10 + count))))
    responses = await collect(stream)
    answered = [r for r in responses if not r.empty]
    assert [int(r.outputs["OUT"][0]) for r in answered] == list(range(10, 10 + count))
    assert [int(r.outputs["IDX"][0]) for r in answered] == list(range(count))
    assert responses[-1].final and responses[-1].empty and not any(r.final for r in responses[:-1])


@pytest.mark.parametrize("model", MODELS)
async def test_it_ends_a_stream_with_the_models_error_response(server, model):
    responses = await collect(await server.infer_stream(request(model, [1, 2, 3], fail_at=2)))
    assert [int(r.outputs["OUT"][0]) for r in responses if r.outputs] == [1, 2]
    assert responses[-1].final and "element 2 failed on purpose" in responses[-1].error.message
    stats = server.statistics(model)["model_stats"][0]
    assert stats["inference_stats"]["fail"]["count"] == 1 and stats["stream_stats"]["responses"] == 3


@pytest.mark.parametrize("model", MODELS)
async def test_a_cancelled_request_is_seen_by_the_model(server, model):
    stream = await server.infer_stream(request(model, [7], until_cancelled=True))
    first = await anext(stream)
    assert int(first.outputs["OUT"][0]) == 7
    stream.cancel()
    last = await anext(stream)
    assert last.final and int(last.outputs["OUT"][0]) == -1  # the model saw request.is_cancelled()
    streams = server.statistics(model)["model_stats"][0]["stream_stats"]
    assert streams["in_flight"] == 0 and streams["cancelled"] == 1


async def test_many_streams_run_at_once_and_count_where_they_end(server):
    streams = [await server.infer_stream(request("repeat", [n, n + 1, n + 2])) for n in range(0, 30, 3)]
    results = [[int(r.outputs["OUT"][0]) for r in await collect(s) if r.outputs] for s in streams]
    assert results == [[n, n + 1, n + 2] for n in range(0, 30, 3)]
    stats = server.statistics("repeat")["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] == 10
    streams_stats = stats["stream_stats"]
    assert streams_stats["finished"] == 10 and streams_stats["responses"] == 30 and streams_stats["in_flight"] == 0
    assert streams_stats["first_response"]["count"] == 10 and streams_stats["between_responses"]["count"] == 20


async def test_a_raising_execute_answers_every_request_with_its_error(server):
    responses = await collect(await server.infer_stream(request("raises", [1])))
    assert len(responses) == 1 and responses[0].final
    assert "this decoupled model cannot run" in responses[0].error.message


async def test_infer_refuses_a_decoupled_model(server):
    with pytest.raises(DecoupledOnly, match="generate_stream or gRPC ModelStreamInfer") as refused:
        await server.infer(request("repeat", [1]))
    assert refused.value.status == 400


async def test_a_model_that_is_not_decoupled_streams_its_one_response(tmp_path):
    from tests.engine.model_factory import make_simple_onnx

    repo = tmp_path / "repo"
    make_simple_onnx(repo, "simple")
    engine = InferenceServer(repo, gpu_count=0, settings=EngineSettings())
    await engine.start(load_models=True)
    try:
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        stream = await engine.infer_stream(InferenceRequest("simple", {"INPUT0": a, "INPUT1": a}, batch_size=1))
        responses = await collect(stream)
        assert len(responses) == 1 and responses[0].final and (responses[0].outputs["OUTPUT0"] == 2 * a).all()
    finally:
        await engine.stop()
