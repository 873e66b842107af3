"""The asyncio side of scheduling: queue requests in the batcher, hand batches to free instances, answer callers."""

from __future__ import annotations

import asyncio
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
        self._running: set[asyncio.Task] = set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"dispatch-{self.name}-{self.version}"
        )

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
        self.stats.pending += 1
        self._wake.set()
        try:
            outputs = await pending.future
        except InferaError:
            self.stats.record_failure(time.monotonic_ns() - now)
            raise
        return InferenceResponse(
            model_name=self.name, model_version=self.version, outputs=outputs, id=request.id
        )

    async def _run(self) -> None:
        batcher = self.batcher
        while True:
            self._wake.clear()
            now = time.monotonic_ns()
            for p in batcher.expire(now):
                self._answer_timeout(p)
            batch = batcher.next_batch(now) if self.idle else None
            if batch is None:
                deadline = batcher.next_deadline() if self.idle else None
                if deadline is None:
                    await self._wake.wait()
                else:
                    timeout = max(deadline - time.monotonic_ns(), 0) / 1e9
                    try:
                        await asyncio.wait_for(self._wake.wait(), timeout)
                    except TimeoutError:
                        pass
                continue
            instance = self.idle.pop()
            task = asyncio.get_running_loop().create_task(self._execute(instance, batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _execute(self, instance: ModelInstance, batch: Batch) -> None:
        requests = batch.requests
        self.stats.pending -= len(requests)
        start = time.monotonic_ns()
        try:
            outputs, times = await instance.execute(
                [p.request.inputs for p in requests], [p.batch_size for p in requests]
            )
        except Exception as exc:  # noqa: BLE001 - a failed batch fails only its own requests
            error = (
                exc if isinstance(exc, InferaError) else BackendError(f"model '{self.name}' failed: {exc}")
            )
            for p in requests:
                if not p.future.done():
                    p.future.set_exception(error)
        else:
            done = time.monotonic_ns()
            self.stats.record_batch(batch.size, times, len(requests))
            for p, out in zip(requests, outputs, strict=True):
                if not p.future.done():
                    p.future.set_result(out)
                    self.stats.record_success(done - p.enqueue_ns, start - p.enqueue_ns, done)
        finally:
            self.idle.append(instance)
            self._wake.set()

    def _answer_timeout(self, pending: PendingRequest) -> None:
        self.stats.pending -= 1
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
            await asyncio.gather(*self._running, return_exceptions=True)
        for p in self.batcher.expire(time.monotonic_ns() + 10**18) + self.batcher._candidates():
            if not p.future.done():
                p.future.set_exception(
                    Unavailable(f"model '{self.name}' version {self.version} is unloading")
                )
