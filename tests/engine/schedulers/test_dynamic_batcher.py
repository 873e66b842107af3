"""The dynamic batcher's decisions, driven by an explicit clock (no event loop timing involved)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from engine.config.model_config import DynamicBatching, ModelConfig, QueuePolicy, TensorConfig
from engine.errors import QueueFull, Unavailable
from engine.schedulers.batcher import DynamicBatcher, PendingRequest, shape_key
from engine.types import InferenceRequest

US = 1000  # ns


def config(max_batch=8, delay_us=0, preferred=(), queue=None, levels=0, batching=True) -> ModelConfig:
    return ModelConfig(
        name="m",
        max_batch_size=max_batch,
        input=[TensorConfig("X", "TYPE_FP32", [-1])],
        output=[TensorConfig("Y", "TYPE_FP32", [-1])],
        dynamic_batching=DynamicBatching(
            preferred_batch_size=list(preferred),
            max_queue_delay_microseconds=delay_us,
            default_queue_policy=queue or QueuePolicy(),
            priority_levels=levels,
        )
        if batching
        else None,
    )


@pytest.fixture
def loop():
    new = asyncio.new_event_loop()
    yield new
    new.close()


def pending(loop, batch=1, width=4, now=0, priority=0, timeout_us=0) -> PendingRequest:
    request = InferenceRequest(
        model_name="m",
        inputs={"X": np.zeros((batch, width), np.float32)},
        batch_size=batch,
        priority=priority,
        timeout_us=timeout_us,
    )
    return PendingRequest(request, loop.create_future(), now, shape_key(request, True))


def test_it_sends_a_full_batch_at_once(loop):
    batcher = DynamicBatcher(config(max_batch=4, delay_us=10_000))
    for _ in range(5):
        batcher.add(pending(loop), 0)
    batch = batcher.next_batch(0)
    assert batch is not None and batch.size == 4
    assert len(batcher) == 1


def test_it_waits_for_the_delay_then_flushes_what_it_has(loop):
    batcher = DynamicBatcher(config(max_batch=8, delay_us=100))
    batcher.add(pending(loop, now=0), 0)
    batcher.add(pending(loop, batch=2, now=10 * US), 10 * US)
    assert batcher.next_batch(50 * US) is None
    assert batcher.next_deadline() == 100 * US
    batch = batcher.next_batch(100 * US)
    assert batch.size == 3 and len(batch.requests) == 2


def test_it_sends_everything_available_without_a_delay(loop):
    batcher = DynamicBatcher(config(max_batch=8, delay_us=0))
    batcher.add(pending(loop), 0)
    batcher.add(pending(loop), 0)
    assert batcher.next_batch(0).size == 2


def test_it_sends_a_preferred_size_before_the_delay(loop):
    batcher = DynamicBatcher(config(max_batch=8, delay_us=1_000_000, preferred=(2, 4)))
    batcher.add(pending(loop), 0)
    assert batcher.next_batch(0) is None
    batcher.add(pending(loop), 0)
    assert batcher.next_batch(0).size == 2


def test_it_cuts_to_the_largest_preferred_size_after_the_delay(loop):
    batcher = DynamicBatcher(config(max_batch=8, delay_us=100, preferred=(2, 4)))
    for _ in range(5):
        batcher.add(pending(loop), 0)
    # five queued: 4 is preferred and reached on the way, so it goes now
    batch = batcher.next_batch(0)
    assert batch.size == 4
    batch = batcher.next_batch(100 * US)
    assert batch.size == 1


def test_it_batches_only_requests_whose_other_dimensions_agree(loop):
    batcher = DynamicBatcher(config(max_batch=8))
    batcher.add(pending(loop, width=4), 0)
    batcher.add(pending(loop, width=5), 0)
    batcher.add(pending(loop, width=4), 0)
    first = batcher.next_batch(0)
    assert [p.request.inputs["X"].shape[1] for p in first.requests] == [4, 4]
    second = batcher.next_batch(0)
    assert [p.request.inputs["X"].shape[1] for p in second.requests] == [5]


def test_it_never_exceeds_max_batch_size(loop):
    batcher = DynamicBatcher(config(max_batch=4))
    for size in (3, 2, 1):
        batcher.add(pending(loop, batch=size), 0)
    sizes = [batcher.next_batch(0).size, batcher.next_batch(0).size]
    assert sizes == [3, 3]


def test_it_rejects_when_the_queue_is_full(loop):
    batcher = DynamicBatcher(config(queue=QueuePolicy(max_queue_size=2)))
    batcher.add(pending(loop), 0)
    batcher.add(pending(loop), 0)
    with pytest.raises(QueueFull, match="Exceeds maximum queue size") as refused:
        batcher.add(pending(loop), 0)
    assert refused.value.max_queue_size == 2 and isinstance(refused.value, Unavailable)


def test_it_times_out_queued_requests_by_policy(loop):
    policy = QueuePolicy(default_timeout_microseconds=50, allow_timeout_override=True)
    batcher = DynamicBatcher(config(delay_us=1_000_000, queue=policy))
    slow = pending(loop)
    batcher.add(slow, 0)
    short = pending(loop, timeout_us=10)
    batcher.add(short, 0)
    assert batcher.expire(20 * US) == [short]
    assert batcher.expire(60 * US) == [slow]
    assert len(batcher) == 0


def test_it_drops_requests_whose_caller_gave_up(loop):
    batcher = DynamicBatcher(config(delay_us=1_000_000))
    gone = pending(loop)
    batcher.add(gone, 0)
    kept = pending(loop)
    batcher.add(kept, 0)
    gone.future.cancel()
    assert batcher.next_batch(10**12).requests == [kept]
    assert len(batcher) == 0


def test_it_serves_higher_priority_first(loop):
    batcher = DynamicBatcher(config(max_batch=1, levels=2))
    low = pending(loop, priority=2)
    high = pending(loop, priority=1)
    batcher.add(low, 0)
    batcher.add(high, 0)
    assert batcher.next_batch(0).requests == [high]
    assert batcher.next_batch(0).requests == [low]


def test_it_runs_each_request_alone_without_dynamic_batching(loop):
    batcher = DynamicBatcher(config(max_batch=8, batching=False))
    batcher.add(pending(loop, batch=2), 0)
    batcher.add(pending(loop, batch=2), 0)
    assert batcher.next_batch(0).size == 2
    assert batcher.next_batch(0).size == 2
