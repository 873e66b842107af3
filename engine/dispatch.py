"""The asyncio side of scheduling: queue requests in the batcher, hand batches to free instances, answer callers."""

from __future__ import annotations

import asyncio
import functools
import time

from engine.errors import BackendError, InferaError, Unavailable
from engine.instances import ModelInstance
from engine.schedulers.batcher import Batch, DynamicBatcher, PendingRequest, shape_key
from engine.stats import ModelStats
from engine.types import InferenceRequest, InferenceResponse


class Dispatcher:
    """Drives one model version's batcher: wakes on arrivals, free instances and delay deadlines."""

    def __init__(
        self,
        name: str,
        version: int,
        batcher: DynamicBatcher,
        instances: list[ModelInstance],
        stats: ModelStats,
    ) -> None:
        self.name = name
        self.version = version
        self.batcher = batcher
        self.idle: list[ModelInstance] = list(instances)
        self.stats = stats
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._running: set[asyncio.Future] = set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dispatch-{self.name}-{self.version}")

    async def submit(self, request: InferenceRequest) -> InferenceResponse:
        """Queue a validated request and wait for its outputs; raises Unavailable when the queue is full."""
        loop = asyncio.get_running_loop()
        now = time.monotonic_ns()
        pending = PendingRequest(
            request=request,
            future=loop.create_future(),
            enqueue_ns=now,
            shape_key=shape_key(request, self.batcher.batching),
        )
        self.batcher.add(pending, now)
        self.stats.pending = len(self.batcher)
        if self.idle:
            # an idle instance takes the batch now, without a hop through the dispatcher task
            self._dispatch(now)
        else:
            self._wake.set()
        try:
            outputs = await pending.future
        except InferaError:
            self.stats.record_failure(time.monotonic_ns() - now)
            raise
        return InferenceResponse(model_name=self.name, model_version=self.version, outputs=outputs, id=request.id)

    async def _run(self) -> None:
        batcher = self.batcher
        while True:
            self._wake.clear()
            self._dispatch(time.monotonic_ns())
            deadline = batcher.next_deadline() if self.idle and len(batcher) else None
            if deadline is None:
                await self._wake.wait()
            else:
                timeout = max(deadline - time.monotonic_ns(), 0) / 1e9
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout)
                except TimeoutError:
                    pass

    def _dispatch(self, now: int) -> None:
        """Expire timed-out requests, then hand batches to idle instances while the batcher releases them."""
        for p in self.batcher.expire(now):
            self._answer_timeout(p)
        while self.idle:
            batch = self.batcher.next_batch(now)
            if batch is None:
                return
            instance = self.idle.pop()
            requests = batch.requests
            self.stats.pending = len(self.batcher)
            future = instance.execute([p.request.inputs for p in requests], [p.batch_size for p in requests])
            self._running.add(future)
            future.add_done_callback(functools.partial(self._finish, instance, batch, time.monotonic_ns()))

    def _finish(self, instance: ModelInstance, batch: Batch, start: int, future: asyncio.Future) -> None:
        """Answer every request of a finished batch; a failed batch fails only its own requests."""
        self._running.discard(future)
        requests = batch.requests
        exc = future.exception() if not future.cancelled() else Unavailable(f"model '{self.name}' stopped")
        if exc is not None:
            error = exc if isinstance(exc, InferaError) else BackendError(f"model '{self.name}' failed: {exc}")
            for p in requests:
                if not p.future.done():
                    p.future.set_exception(error)
        else:
            outputs, times = future.result()
            done = time.monotonic_ns()
            self.stats.record_batch(batch.size, times, len(requests))
            for p, out in zip(requests, outputs, strict=True):
                if not p.future.done():
                    p.future.set_result(out)
                    self.stats.record_success(done - p.enqueue_ns, start - p.enqueue_ns, done)
        self.idle.append(instance)
        if len(self.batcher):
            self._wake.set()

    def _answer_timeout(self, pending: PendingRequest) -> None:
        self.stats.pending = len(self.batcher)
        if not pending.future.done():
            pending.future.set_exception(
                Unavailable(f"inference request for model '{self.name}' timed out in the queue")
            )

    async def stop(self) -> None:
        """Stop taking batches, wait for running ones, fail whatever is still queued."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self._running:
            await asyncio.wait(list(self._running))
        for p in self.batcher.expire(time.monotonic_ns() + 10**18) + self.batcher._candidates():
            if not p.future.done():
                p.future.set_exception(Unavailable(f"model '{self.name}' version {self.version} is unloading"))
