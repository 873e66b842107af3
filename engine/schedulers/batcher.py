"""The dynamic batcher's bookkeeping: priority queues in, batches out, decided against an explicit clock.

Triton's rules: a batch holds at most `max_batch_size` inferences; it is sent at once when it reaches the
maximum or a preferred size; otherwise the oldest request may wait up to `max_queue_delay_microseconds` for
more company, and then the largest preferred size that can be formed (or everything) goes. Only requests
whose non-batch dimensions agree share a batch. Without `dynamic_batching` each request runs alone (the
default scheduler).

`next_batch(now, limit)` may cap a batch below `max_batch_size` (the dispatcher shares a queue among several idle
instances that way); a batch that reaches its cap goes at once, like a full one.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from engine.config.model_config import ModelConfig, QueuePolicy
from engine.errors import QueueFull
from engine.types import InferenceRequest


@dataclass(slots=True, eq=False)
class PendingRequest:
    """A validated request waiting in a queue, with the future its caller awaits."""

    request: InferenceRequest
    future: asyncio.Future
    enqueue_ns: int
    shape_key: tuple = ()
    deadline_ns: int = 0
    level: int = 0

    @property
    def batch_size(self) -> int:
        return self.request.batch_size


@dataclass(slots=True)
class Batch:
    """Requests that execute together on one instance."""

    requests: list[PendingRequest] = field(default_factory=list)
    size: int = 0


def shape_key(request: InferenceRequest, batching: bool) -> tuple:
    """What must agree for two requests to share a batch: every input's non-batch shape."""
    skip = 1 if batching else 0
    return tuple((name, array.shape[skip:]) for name, array in request.inputs.items())


class DynamicBatcher:
    """Decides which queued requests form the next batch; the caller owns the clock, the loop and the instances."""

    def __init__(self, config: ModelConfig) -> None:
        self.max_batch_size = max(config.max_batch_size, 1)
        self.batching = config.dynamic_batching is not None and config.max_batch_size > 0
        db = config.dynamic_batching
        self.delay_ns = (db.max_queue_delay_microseconds * 1000) if db else 0
        self.preferred = sorted({p for p in (db.preferred_batch_size if db else []) if p <= self.max_batch_size})
        levels = db.priority_levels if db and db.priority_levels > 0 else 1
        self.default_level = (db.default_priority_level or levels) if db and db.priority_levels > 0 else 1
        self.policies: dict[int, QueuePolicy] = {}
        for level in range(1, levels + 1):
            policy = (db.priority_queue_policy.get(level) if db else None) or (db.default_queue_policy if db else None)
            self.policies[level] = policy or QueuePolicy()
        self.queues: dict[int, deque[PendingRequest]] = {level: deque() for level in self.policies}
        self.size = 0  # requests queued
        self.inferences = 0  # their batch sizes added up
        # without timeouts only callers that gave up can expire; they are dropped when a batch is taken
        self.timeouts = any(p.default_timeout_microseconds or p.allow_timeout_override for p in self.policies.values())
        # every request's non-batch shape is the config's (no variable dimension, no optional input): one shape key
        self.uniform = self.batching and all(-1 not in t.dims and not t.optional for t in config.input)
        # one queue, one shape, no preferred sizes: a batch is the queue's head, found without building lists
        self._plain = self.uniform and len(self.queues) == 1 and not self.preferred
        self._queue = self.queues[1] if self._plain else None
        only = self.policies[1] if len(self.queues) == 1 else None
        self._open = only is not None and not only.max_queue_size and not self.timeouts

    def __len__(self) -> int:
        return self.size

    def key_of(self, request: InferenceRequest) -> tuple:
        """The shape key of a request for this model (see shape_key), () for all when the config fixes shapes."""
        return () if self.uniform else shape_key(request, self.batching)

    def level_of(self, request: InferenceRequest) -> int:
        """The priority queue a request goes to (1 is the highest; 0 means the default level)."""
        if request.priority and request.priority in self.queues:
            return request.priority
        return self.default_level

    def add(self, pending: PendingRequest, now_ns: int) -> None:
        """Queue a request, or raise QueueFull when its priority queue holds `max_queue_size` requests."""
        if self._open:  # one level, no size limit, no timeouts: nothing to decide
            pending.level = 1
            pending.enqueue_ns = pending.enqueue_ns or now_ns
            self.queues[1].append(pending)
            self.size += 1
            self.inferences += pending.request.batch_size
            return
        level = self.level_of(pending.request)
        policy = self.policies[level]
        queue = self.queues[level]
        if policy.max_queue_size and len(queue) >= policy.max_queue_size:
            raise QueueFull(pending.request.model_name, policy.max_queue_size)
        timeout_us = policy.default_timeout_microseconds
        if policy.allow_timeout_override and pending.request.timeout_us:
            timeout_us = pending.request.timeout_us if not timeout_us else min(timeout_us, pending.request.timeout_us)
        pending.level = level
        pending.deadline_ns = now_ns + timeout_us * 1000 if timeout_us else 0
        pending.enqueue_ns = pending.enqueue_ns or now_ns
        queue.append(pending)
        self.size += 1
        self.inferences += pending.request.batch_size

    def expire(self, now_ns: int) -> list[PendingRequest]:
        """Remove and return requests whose queue timeout passed (REJECT policy) or whose caller gave up."""
        expired: list[PendingRequest] = []
        if not self.timeouts:
            return expired
        for level, queue in self.queues.items():
            if not queue:
                continue
            reject = self.policies[level].timeout_action != "DELAY"
            keep: deque[PendingRequest] = deque()
            for p in queue:
                if p.future.done() or (reject and p.deadline_ns and p.deadline_ns <= now_ns):
                    expired.append(p)
                else:
                    keep.append(p)
            self.queues[level] = keep
        self.size -= len(expired)
        self.inferences -= sum(p.request.batch_size for p in expired)
        if self._plain:
            self._queue = self.queues[1]
        return expired

    def _candidates(self) -> list[PendingRequest]:
        """Live requests in dispatch order: higher priority first, then arrival (abandoned ones are dropped)."""
        ordered: list[PendingRequest] = []
        for level in sorted(self.queues):
            queue = self.queues[level]
            if any(p.future.done() for p in queue):
                live = deque(p for p in queue if not p.future.done())
                self.size -= len(queue) - len(live)
                self.inferences -= sum(p.request.batch_size for p in queue) - sum(p.request.batch_size for p in live)
                self.queues[level] = queue = live
                if self._plain:
                    self._queue = queue
            ordered.extend(queue)
        return ordered

    def next_batch(self, now_ns: int, limit: int = 0) -> Batch | None:
        """The batch to send now, or None to wait (until `next_deadline`, or for more requests).

        `limit` (when positive) caps the batch's inferences below `max_batch_size`."""
        if not self.size:
            return None
        cap = min(limit, self.max_batch_size) if limit > 0 else self.max_batch_size
        if self._plain:
            return self._next_plain(now_ns, cap)
        candidates = self._candidates()
        if not candidates:
            return None
        head = candidates[0]
        if not self.batching:
            return self._take([head])
        chosen: list[PendingRequest] = []
        total = 0
        sizes_at: list[int] = []  # running total after each chosen request
        for p in candidates:
            if p.shape_key != head.shape_key:
                continue
            if total + p.batch_size > cap:
                if total == 0:  # a request that alone exceeds the limit was rejected at validation
                    chosen.append(p)
                break
            chosen.append(p)
            total += p.batch_size
            sizes_at.append(total)
        at_preferred = any(s in self.preferred for s in sizes_at)
        if total < cap and not at_preferred and now_ns - head.enqueue_ns < self.delay_ns:
            return None
        if self.preferred:
            best = max((s for s in sizes_at if s in self.preferred), default=0)
            if best:
                return self._take(chosen[: sizes_at.index(best) + 1])
        return self._take(chosen)

    def _next_plain(self, now_ns: int, cap: int) -> Batch | None:
        """next_batch for one queue of one shape: the head's requests up to `cap`, callers who gave up dropped."""
        queue = self._queue
        chosen: list[PendingRequest] = []
        total = 0
        for p in queue:
            if p.future.done():
                continue
            size = p.request.batch_size
            if total + size > cap and chosen:
                break
            chosen.append(p)
            total += size
            if total >= cap:
                break
        if not chosen:
            self._drop_abandoned(len(queue))
            return None
        if total < cap and now_ns - chosen[0].enqueue_ns < self.delay_ns:
            return None
        taken = 0
        popleft = queue.popleft
        while taken < len(chosen):  # chosen is the queue's head, save callers who gave up in between
            p = popleft()
            if p is chosen[taken]:
                taken += 1
            else:
                self.size -= 1
                self.inferences -= p.request.batch_size
        self.size -= taken
        self.inferences -= total
        return Batch(requests=chosen, size=total)

    def _drop_abandoned(self, count: int) -> None:
        queue = self._queue
        for _ in range(count):
            p = queue.popleft()
            self.size -= 1
            self.inferences -= p.request.batch_size

    def next_deadline(self) -> int | None:
        """When the oldest request's delay expires (monotonic ns), if the batcher is waiting on a delay."""
        if not self.size or not self.batching or not self.delay_ns:
            return None
        candidates = self._candidates()
        if not candidates:
            return None
        head = candidates[0]
        deadline = head.enqueue_ns + self.delay_ns
        timeouts = [p.deadline_ns for q in self.queues.values() for p in q if p.deadline_ns]
        return min([deadline, *timeouts])

    def _take(self, chosen: list[PendingRequest]) -> Batch:
        count = len(chosen)
        queue = self.queues[chosen[0].level]
        if len(self.queues) == 1 and queue[count - 1] is chosen[-1]:
            # the usual case, one priority level and the batch its head: chosen keeps queue order, so a batch whose
            # last request sits at position count - 1 is the queue's first `count` requests
            for _ in range(count):
                queue.popleft()
        else:
            ids = {id(p) for p in chosen}
            for level, queue in self.queues.items():
                if any(id(p) in ids for p in queue):
                    self.queues[level] = deque(p for p in queue if id(p) not in ids)
        size = sum(p.request.batch_size for p in chosen)
        self.size -= count
        self.inferences -= size
        return Batch(requests=chosen, size=size)
