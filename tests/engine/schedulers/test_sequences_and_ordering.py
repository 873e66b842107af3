"""Sequence batching keeps a correlation id on one instance in order; preserve_ordering answers in arrival order."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from engine.config.model_config import DynamicBatching, InstanceGroup, SequenceBatching
from engine.errors import InvalidArgument
from engine.serving.lifecycle import ModelManager
from engine.types import InferenceRequest
from tests.engine.serving.test_lifecycle import (  # noqa: F401 - the autouse fixture resets the registered backend
    ScaleBackend,
    make_config,
    reset_backend,
    version_dir,
)


def sequence_request(sid, value, start=False, end=False) -> InferenceRequest:
    return InferenceRequest(
        model_name="scale",
        inputs={"X": np.full((1, 2), value, np.float32)},
        batch_size=1,
        sequence_id=sid,
        sequence_start=start,
        sequence_end=end,
    )


async def test_it_keeps_each_sequence_on_one_instance_and_refuses_a_sequence_without_start(tmp_path):
    config = make_config(
        dynamic_batching=None,
        sequence_batching=SequenceBatching(),
        instance_group=[InstanceGroup(kind="KIND_CPU", count=2)],
    )
    manager = ModelManager()
    await manager.load(config, {1: version_dir(tmp_path, 1, "2")})
    served = manager.get("scale")
    with pytest.raises(InvalidArgument, match="must specify the START flag"):
        await served.infer(sequence_request(7, 1))
    with pytest.raises(InvalidArgument, match="non-zero or non-empty correlation ID"):
        await served.infer(sequence_request(0, 1, start=True))
    await served.infer(sequence_request(7, 1, start=True))
    await served.infer(sequence_request(8, 1, start=True))
    sequences = served.dispatcher.batcher.sequences
    assert {sequences[7].lane, sequences[8].lane} == {0, 1}
    lane_of_7 = sequences[7].lane
    response = await served.infer(sequence_request(7, 3, end=True))
    assert response.outputs["Y"].tolist() == [[6, 6]]
    assert 7 not in sequences and sequences[8].lane != lane_of_7
    await manager.stop()


async def test_it_puts_one_request_of_a_sequence_in_a_batch_so_order_holds(tmp_path):
    config = make_config(dynamic_batching=None, sequence_batching=SequenceBatching())
    manager = ModelManager()
    await manager.load(config, {1: version_dir(tmp_path, 1, "1")})
    served = manager.get("scale")
    ScaleBackend.gate = threading.Event()
    first = asyncio.create_task(served.infer(sequence_request(1, 1, start=True)))
    while not ScaleBackend.batches:
        await asyncio.sleep(0)
    queued = [
        asyncio.create_task(served.infer(sequence_request(1, 2))),
        asyncio.create_task(served.infer(sequence_request(2, 5, start=True))),
        asyncio.create_task(served.infer(sequence_request(1, 3, end=True))),
    ]
    while served.stats.pending < 3:
        await asyncio.sleep(0)
    ScaleBackend.gate.set()
    results = await asyncio.gather(first, *queued)
    # batch 2 takes sequence 1's second request and sequence 2's first; sequence 1's last waits for batch 3
    assert ScaleBackend.batches == [1, 2, 1]
    assert [r.outputs["Y"][0, 0] for r in results] == [1, 2, 5, 3]
    await manager.stop()


async def test_it_answers_batches_in_arrival_order_when_preserve_ordering_is_set(tmp_path):
    config = make_config(
        max_batch_size=1,
        dynamic_batching=DynamicBatching(preserve_ordering=True),
        instance_group=[InstanceGroup(kind="KIND_CPU", count=2)],
    )
    manager = ModelManager()
    await manager.load(config, {1: version_dir(tmp_path, 1, "1")})
    served = manager.get("scale")
    instances = served.instances
    # hold the first instance so the second request's batch finishes first
    held = threading.Event()
    original = instances[0].backend.execute

    def slow(batch):
        held.wait(timeout=10)
        return original(batch)

    answered: list[float] = []

    async def call(value):
        response = await served.infer(
            InferenceRequest(model_name="scale", inputs={"X": np.full((1, 2), value, np.float32)}, batch_size=1)
        )
        answered.append(float(response.outputs["Y"][0, 0]))

    served.dispatcher.lanes[0].idle.sort(key=lambda i: i is instances[0])  # instances[0] is popped first
    instances[0].backend.execute = slow
    first = asyncio.create_task(call(1))
    await asyncio.sleep(0)
    second = asyncio.create_task(call(2))
    flights = served.dispatcher._flights
    while not (len(flights) == 2 and flights[1].done):  # the second batch finished first
        await asyncio.sleep(0.001)
    await asyncio.sleep(0)
    assert answered == []  # ...and its answer waits for the first batch
    held.set()
    await asyncio.gather(first, second)
    assert answered == [1.0, 2.0]
    await manager.stop()
