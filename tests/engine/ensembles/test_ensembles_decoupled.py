"""Ensembles with a decoupled step, as Triton runs them: the ensemble is decoupled itself, each response of the step
runs the steps after it, the ensemble answers once per complete set of outputs, errors and cancellation reach the
whole pipeline, and a step fed by different decoupled sources is refused at load with Triton's message."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import numpy as np
import pytest

from engine.errors import DecoupledOnly
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings
from engine.types import InferenceRequest
from tests.engine.decoupled_models import (
    DECOUPLED,
    IN_PROCESS,
    REPEAT,
    ensemble_config,
    make_decoupled_ensemble,
    repeat_config,
)
from tests.engine.model_factory import make_python_model, python_config

ADD = textwrap.dedent(
    """
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            def value(request, name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy()

            return [
                pb_utils.InferenceResponse([pb_utils.Tensor("Y", value(r, "X") + value(r, "OFFSET"))]) for r in requests
            ]
    """
)
MIXED_INPUTS = 'input_map { key: "X" value: "ELEMENT" } input_map { key: "OFFSET" value: "SHIFT" }'
SHIFT = 'input [ { name: "SHIFT" data_type: TYPE_INT32 dims: [ 1 ] } ]'


@pytest.fixture
async def server(tmp_path: Path):
    make_python_model(tmp_path, "repeat", REPEAT, repeat_config("repeat"), extra_config=DECOUPLED + IN_PROCESS)
    make_decoupled_ensemble(tmp_path, IN_PROCESS)
    pair = [("X", "TYPE_INT32", [1]), ("OFFSET", "TYPE_INT32", [1])]
    config = python_config("add", pair, [("Y", "TYPE_INT32", [1])], max_batch_size=0)
    make_python_model(tmp_path, "add", ADD, config, extra_config=IN_PROCESS)
    for name, config in (
        # X from repeat's responses, OFFSET from the request itself: two different origins
        (
            "mixed",
            ensemble_config("mixed", "add", MIXED_INPUTS, SHIFT),
        ),
    ):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "config.pbtxt").write_text(config)
    server = InferenceServer(tmp_path, gpu_count=0, settings=EngineSettings())
    await server.start()
    yield server
    await server.stop()


def request(values: list[int], **parameters) -> InferenceRequest:
    return InferenceRequest("each_plus_one", {"IN": np.array(values, np.int32)}, parameters=parameters)


async def responses_of(server: InferenceServer, values: list[int], **parameters) -> list:
    stream = await server.infer_stream(request(values, **parameters))
    return await asyncio.wait_for(_all(stream), timeout=30)


async def _all(stream) -> list:
    return [response async for response in stream]


@pytest.mark.parametrize("values", [[], [7], [10, 20, 30, 40, 50]])
async def test_it_answers_once_per_response_of_its_decoupled_step(server, values):
    answers = await responses_of(server, values)
    assert answers[-1].final and not any(r.final for r in answers[:-1])
    results = sorted((int(r.outputs["INDEX"][0]), int(r.outputs["RESULT"][0])) for r in answers if r.outputs)
    assert results == [(index, value + 1) for index, value in enumerate(values)]
    stats = server.statistics("each_plus_one")["model_stats"][0]
    assert stats["stream_stats"]["finished"] == 1 and stats["stream_stats"]["in_flight"] == 0


async def test_the_ensemble_is_decoupled_itself(server):
    assert server.model_config("each_plus_one").decoupled
    with pytest.raises(DecoupledOnly, match="generate_stream"):
        await server.infer(request([1]))


async def test_an_error_in_a_step_ends_the_stream_with_it(server):
    answers = await responses_of(server, [1, 2, 3], fail_at=1)
    assert answers[-1].final and answers[-1].error is not None
    assert "in ensemble 'each_plus_one', step 0 ('repeat'): element 1 failed on purpose" in answers[-1].error.message


async def test_a_cancelled_stream_cancels_its_decoupled_step(server):
    stream = await server.infer_stream(request([5], until_cancelled=True))
    reader = aiter(stream)
    first = await asyncio.wait_for(anext(reader), timeout=30)
    assert int(first.outputs["RESULT"][0]) == 6
    stream.cancel()  # the client went away: repeat sees request.is_cancelled() and ends its own stream
    rest = await asyncio.wait_for(_all(reader), timeout=30)
    assert rest[-1].final and all(not r.outputs for r in rest)


async def test_a_step_fed_by_different_decoupled_origins_is_refused(server):
    (row,) = [row for row in server.repository_index() if row["name"] == "mixed"]
    assert row["state"] == "UNAVAILABLE"
    assert row["reason"] == (
        "in ensemble 'mixed', step of model 'add' receives inputs originated from different decoupled models"
    )
