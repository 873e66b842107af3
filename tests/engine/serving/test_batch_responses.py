"""A batch's responses carry where their outputs sit in the batch's outputs, for codecs that encode a batch once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from engine.backends import Backend
from engine.backends.base import Device
from engine.config.model_config import DynamicBatching, ModelConfig, TensorConfig
from engine.schedulers.dispatcher import DynamicDispatcher
from engine.serving.instances import ModelInstance
from engine.serving.stats import ModelStats
from engine.types import InferenceRequest, InferenceResponse

CONFIG = ModelConfig(
    name="echo",
    max_batch_size=8,
    input=[TensorConfig("INPUT0", "TYPE_FP32", [2])],
    output=[TensorConfig("INPUT0", "TYPE_FP32", [2])],
    dynamic_batching=DynamicBatching(),
)


class EchoBackend(Backend):
    """Answers each batch with its own input."""

    name = "echo-rows"

    def __init__(self) -> None:
        super().__init__(CONFIG, Path("."), Device("CPU", 0))

    def load(self) -> None:
        pass

    def execute(self, batch):
        return batch


class OwnSplitBackend(EchoBackend):
    """Splits its outputs its own way (as the python backend answers each request apart)."""

    def split(self, outputs, batch_sizes):
        return [{name: array[:size].copy() for name, array in outputs.items()} for size in batch_sizes]


def _request(value: float, rows: int) -> InferenceRequest:
    inputs = {"INPUT0": np.full((rows, 2), value, np.float32)}
    return InferenceRequest(model_name="echo", inputs=inputs, batch_size=rows)


def _answers(backend: Backend, requests: list[InferenceRequest]) -> list[InferenceResponse]:
    """Submit `requests` in one loop turn to a dispatcher over one instance; their responses."""
    instance = ModelInstance("echo-1-0", backend, inline_below_ns=0)
    instance.start()

    async def scenario() -> list[InferenceResponse]:
        dispatcher = DynamicDispatcher("echo", 1, CONFIG, [instance], ModelStats("echo", 1), cores=2)
        dispatcher.start()
        responses = await asyncio.gather(*(dispatcher.submit(r) for r in requests))
        await dispatcher.stop()
        return responses

    try:
        return asyncio.run(scenario())
    finally:
        instance.stop()


def test_it_answers_each_request_of_a_batch_with_its_rows_of_the_batchs_outputs() -> None:
    responses = _answers(EchoBackend(), [_request(1, 1), _request(2, 2), _request(3, 1)])

    batch = responses[0].rows[0]
    assert [r.rows for r in responses] == [(batch, 0, 1), (batch, 1, 3), (batch, 3, 4)]
    np.testing.assert_array_equal(batch.arrays["INPUT0"][:, 0], [1, 2, 2, 3])
    for response in responses:
        _, start, stop = response.rows
        np.testing.assert_array_equal(response.outputs["INPUT0"], batch.arrays["INPUT0"][start:stop])


def test_a_request_alone_in_its_batch_carries_no_rows() -> None:
    (response,) = _answers(EchoBackend(), [_request(1, 2)])
    assert response.rows is None
    np.testing.assert_array_equal(response.outputs["INPUT0"], np.full((2, 2), 1, np.float32))


def test_a_backend_that_splits_its_own_way_answers_without_rows() -> None:
    responses = _answers(OwnSplitBackend(), [_request(1, 1), _request(2, 1)])
    assert [r.rows for r in responses] == [None, None]
