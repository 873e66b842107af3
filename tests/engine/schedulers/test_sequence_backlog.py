"""The sequence batcher's backlog: bounded, and emptied of sequences whose callers went away (explicit clock)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from engine.config.model_config import ModelConfig, SequenceBatching
from engine.errors import Unavailable
from engine.schedulers.batcher import PendingRequest
from engine.schedulers.sequence import SequenceBacklogFull, SequenceBatcher, TooManySequences
from engine.types import InferenceRequest


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def batcher_of(strategy: str = "direct", max_backlog: int = 256, max_per_caller: int = 128, **options):
    config = ModelConfig(name="acc", max_batch_size=1, sequence_batching=SequenceBatching(strategy=strategy, **options))
    return SequenceBatcher(config, lanes=1, max_backlog=max_backlog, max_per_caller=max_per_caller)


def pending(loop, sid, start=False, end=False) -> PendingRequest:
    request = InferenceRequest(
        model_name="acc",
        inputs={"INPUT": np.zeros((1, 1), np.int32)},
        sequence_id=sid,
        sequence_start=start,
        sequence_end=end,
    )
    return PendingRequest(request=request, future=loop.create_future(), enqueue_ns=0)


@pytest.mark.parametrize("strategy", ["direct", "oldest"])
def test_it_forgets_backlogged_starts_whose_callers_went_away(loop, strategy):
    batcher = batcher_of(strategy)
    batcher.add(pending(loop, 1, start=True), 0)  # holds the only slot
    gone = [pending(loop, sid, start=True) for sid in range(100, 140)]
    for request in gone:
        batcher.add(request, 0)
    assert len(batcher.backlog) == 40
    for request in gone:
        assert batcher.abandon(request) == []
    assert not batcher.backlog and batcher.queued == 1 and batcher.abandoned == 40
    assert not any(batcher.knows(sid) for sid in range(100, 140))
    batcher.add(pending(loop, 2, start=True), 0)
    assert [s.id for s in batcher.backlog] == [2]  # next in line, behind no one who left


def test_it_frees_the_slot_of_a_sequence_whose_start_never_ran(loop):
    batcher = batcher_of(max_queue_delay_microseconds=10**9, minimum_slot_utilization=1.0)
    start = pending(loop, 1, start=True)
    batcher.add(start, 0)
    batcher.add(pending(loop, 2, start=True), 0)
    assert batcher.sequences[1].slot == 0 and [s.id for s in batcher.backlog] == [2]
    assert batcher.abandon(start) == []
    assert not batcher.knows(1) and batcher.sequences[2].slot == 0 and not batcher.backlog
    assert [e.request.sequence_id for e in batcher.next_batch(0, 0).requests] == [2]


def test_it_hands_back_the_queued_rest_of_a_sequence_whose_start_left(loop):
    batcher = batcher_of()
    batcher.add(pending(loop, 1, start=True), 0)
    start, later = pending(loop, 2, start=True), pending(loop, 2, end=True)
    batcher.add(start, 0)
    batcher.add(later, 0)
    assert batcher.abandon(start) == [later]
    assert not batcher.knows(2) and not batcher.backlog and batcher.queued == 1


def test_it_keeps_a_sequence_that_ran_when_a_later_request_leaves(loop):
    batcher = batcher_of()
    start = pending(loop, 1, start=True)
    batcher.add(start, 0)
    batcher.finished(batcher.next_batch(0, 0).requests[0], 1)
    end = pending(loop, 1, end=True)
    batcher.add(end, 2)
    assert batcher.abandon(end) == []
    assert batcher.knows(1) and batcher.queued == 0 and not batcher.sequences[1].ending
    batcher.add(pending(loop, 1, end=True), 3)  # the client may still send its END
    assert batcher.queued == 1


def test_a_request_already_in_a_batch_is_left_to_its_answer(loop):
    batcher = batcher_of()
    start = pending(loop, 1, start=True)
    batcher.add(start, 0)
    assert batcher.next_batch(0, 0).requests == [start]
    assert batcher.abandon(start) == [] and batcher.knows(1) and batcher.abandoned == 0


@pytest.mark.parametrize("strategy", ["direct", "oldest"])
def test_it_refuses_a_start_past_the_backlog_limit_naming_it(loop, strategy):
    batcher = batcher_of(strategy, max_backlog=2)
    for sid in (1, 2, 3):
        batcher.add(pending(loop, sid, start=True), 0)
    with pytest.raises(SequenceBacklogFull, match="INFERA_SEQUENCE_MAX_BACKLOG") as refused:
        batcher.add(pending(loop, 4, start=True), 0)
    assert isinstance(refused.value, Unavailable) and refused.value.status == 503
    assert not batcher.knows(4) and len(batcher.backlog) == 2
    batcher.add(pending(loop, 1), 0)  # requests of live sequences still queue
    batcher.abandon(batcher.backlog[0].queue[0])
    batcher.add(pending(loop, 4, start=True), 0)  # a place came free
    assert [s.id for s in batcher.backlog] == [3, 4]


def test_it_counts_each_callers_open_sequences_until_they_end_or_idle_out(loop):
    batcher = batcher_of(max_per_caller=2, max_sequence_idle_microseconds=1000)
    first = pending(loop, 1, start=True)
    batcher.add(first, 0, "mallory")
    batcher.add(pending(loop, 2, start=True), 0, "mallory")  # in the backlog: open too
    with pytest.raises(TooManySequences, match="INFERA_SEQUENCE_MAX_PER_CALLER") as refused:
        batcher.add(pending(loop, 3, start=True), 0, "mallory")
    assert refused.value.status == 429 and not batcher.knows(3)
    batcher.add(pending(loop, 4, start=True), 0, "alice")
    batcher.add(pending(loop, 5, start=True), 0)  # the engine's own requests are nobody's
    assert batcher.open_by_caller == {"mallory": 2, "alice": 1}
    batcher.abandon(batcher.sequences[2].queue[0])
    assert batcher.open_by_caller == {"mallory": 1, "alice": 1}
    batcher.finished(batcher.next_batch(0, 0).requests[0], 1)  # sequence 1 ran its START, then idles out
    batcher.expire(1 + 2 * 1_000_000)
    assert not batcher.knows(1) and batcher.open_by_caller.get("mallory") is None
    batcher.add(pending(loop, 3, start=True), 3 * 1_000_000, "mallory")
    assert batcher.open_by_caller["mallory"] == 1
