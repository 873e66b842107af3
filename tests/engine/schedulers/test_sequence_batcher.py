"""The sequence batcher's bookkeeping (direct and oldest) against an explicit clock: no loop, no sleeps."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from engine.config.model_config import ModelConfig, SequenceBatching
from engine.errors import InvalidArgument
from engine.schedulers.batcher import PendingRequest
from engine.schedulers.sequence import SequenceBatcher
from engine.types import InferenceRequest

MS = 1_000_000


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def config(strategy: str = "direct", max_batch_size: int = 2, **options) -> ModelConfig:
    return ModelConfig(
        name="acc", max_batch_size=max_batch_size, sequence_batching=SequenceBatching(strategy=strategy, **options)
    )


def pending(loop, sid, start=False, end=False, enqueue_ns=0) -> PendingRequest:
    request = InferenceRequest(
        model_name="acc",
        inputs={"INPUT": np.zeros((1, 1), np.int32)},
        sequence_id=sid,
        sequence_start=start,
        sequence_end=end,
    )
    return PendingRequest(request=request, future=loop.create_future(), enqueue_ns=enqueue_ns)


def ids(batch) -> list:
    return [None if e is None else e.request.sequence_id for e in batch.entries]


def test_it_gives_each_new_sequence_a_slot_and_fills_empty_slots_in_a_batch(loop):
    batcher = SequenceBatcher(config(max_batch_size=3), lanes=1)
    for sid in (11, 12, 13):
        batcher.add(pending(loop, sid, start=True), 0)
    first = batcher.next_batch(0, 0)
    assert ids(first) == [11, 12, 13]
    for entry in first.requests:
        batcher.finished(entry, 1)
    batcher.add(pending(loop, 13), 2)  # only the third slot has a request: slots 0 and 1 are fillers
    assert ids(batcher.next_batch(0, 2)) == [None, None, 13]


def test_it_keeps_sequences_over_the_slots_in_a_backlog_until_one_ends(loop):
    batcher = SequenceBatcher(config(max_batch_size=1), lanes=2)
    for sid in (1, 2, 3):
        batcher.add(pending(loop, sid, start=True), 0)
    assert [s.id for s in batcher.backlog] == [3] and batcher.slots_in_use() == 2
    for lane in (0, 1):
        batcher.finished(batcher.next_batch(lane, 0).requests[0], 1)
    lane = batcher.sequences[1].lane
    batcher.add(pending(loop, 1, end=True), 2)
    batcher.finished(batcher.next_batch(lane, 2).requests[0], 3)
    assert 1 not in batcher.sequences and not batcher.backlog
    assert batcher.sequences[3].lane == lane and ids(batcher.next_batch(lane, 3)) == [3]


def test_it_runs_one_request_of_a_sequence_at_a_time_in_order(loop):
    batcher = SequenceBatcher(config(max_batch_size=4), lanes=1)
    first, second = pending(loop, 5, start=True), pending(loop, 5)
    batcher.add(first, 0)
    batcher.add(second, 0)
    assert batcher.next_batch(0, 0).requests == [first]
    assert batcher.next_batch(0, 0) is None  # the second waits for the first to finish
    batcher.finished(first, 1)
    assert batcher.next_batch(0, 1).requests == [second]


def test_it_waits_for_minimum_slot_utilization_until_the_queue_delay(loop):
    options = {"minimum_slot_utilization": 0.75, "max_queue_delay_microseconds": 1000}
    batcher = SequenceBatcher(config(max_batch_size=4, **options), lanes=1)
    batcher.add(pending(loop, 1, start=True, enqueue_ns=0), 0)
    batcher.add(pending(loop, 2, start=True, enqueue_ns=0), 0)
    assert batcher.next_batch(0, 0) is None and batcher.next_deadline(0) == 1 * MS
    assert ids(batcher.next_batch(0, 1 * MS)) == [1, 2]


def test_it_refuses_what_triton_refuses(loop):
    batcher = SequenceBatcher(config(), lanes=1)
    with pytest.raises(InvalidArgument, match="must specify the START flag on the first request"):
        batcher.add(pending(loop, 9), 0)
    with pytest.raises(InvalidArgument, match="non-zero or non-empty correlation ID"):
        batcher.add(pending(loop, 0, start=True), 0)
    with pytest.raises(InvalidArgument, match="non-zero or non-empty correlation ID"):
        batcher.add(pending(loop, "", start=True), 0)
    wide = pending(loop, 4, start=True)
    wide.request.batch_size = 2
    with pytest.raises(InvalidArgument, match="must specify batch-size 1"):
        batcher.add(wide, 0)


def test_an_idle_sequence_frees_its_slot_and_its_id_is_then_unknown(loop):
    batcher = SequenceBatcher(config(max_batch_size=1, max_sequence_idle_microseconds=5000), lanes=1)
    start = pending(loop, "user-a", start=True)
    batcher.add(start, 0)
    batcher.finished(batcher.next_batch(0, 0).requests[0], 1 * MS)
    batcher.add(pending(loop, "user-b", start=True), 2 * MS)  # waits: the one slot is user-a's
    assert [s.id for s in batcher.backlog] == ["user-b"] and batcher.idle_deadline() == 6 * MS
    assert [s.id for s in batcher.expire(6 * MS + 1)] == ["user-a"]
    assert batcher.sequences["user-b"].slot == 0 and not batcher.backlog
    with pytest.raises(InvalidArgument, match="sequence user-a .* must specify the START flag"):
        batcher.add(pending(loop, "user-a"), 7 * MS)


def test_oldest_batches_the_oldest_waiting_sequences_of_an_instance(loop):
    batcher = SequenceBatcher(config("oldest", max_batch_size=3, max_candidate_sequences=4), lanes=1)
    for sid, at in ((1, 30), (2, 10), (3, 20), (4, 40)):
        batcher.add(pending(loop, sid, start=True, enqueue_ns=at), at)
    assert ids(batcher.next_batch(0, 50)) == [2, 3, 1]
    assert ids(batcher.next_batch(0, 50)) == [4]


def test_oldest_prefers_a_preferred_batch_size_and_waits_for_the_delay(loop):
    options = {"max_candidate_sequences": 8, "preferred_batch_size": [2], "max_queue_delay_microseconds": 1000}
    batcher = SequenceBatcher(config("oldest", max_batch_size=4, **options), lanes=1)
    batcher.add(pending(loop, 1, start=True, enqueue_ns=0), 0)
    assert batcher.next_batch(0, 0) is None and batcher.next_deadline(0) == 1 * MS
    for sid in (2, 3):
        batcher.add(pending(loop, sid, start=True, enqueue_ns=10), 10)
    assert ids(batcher.next_batch(0, 10)) == [1, 2]  # three wait: the preferred two go now


def test_oldest_keeps_sequences_past_the_candidates_in_the_backlog(loop):
    batcher = SequenceBatcher(config("oldest", max_batch_size=2, max_candidate_sequences=1), lanes=2)
    for sid in (1, 2, 3):
        batcher.add(pending(loop, sid, start=True), 0)
    assert [s.id for s in batcher.backlog] == [3]
    assert {batcher.sequences[1].lane, batcher.sequences[2].lane} == {0, 1}
