"""Model instances: one backend object bound to one device, executed by its own worker thread."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from engine.backends.base import Backend
from engine.stats import ComputeTimes
from engine.types import InferenceRequest

_STOP = object()


class ModelInstance:
    """Runs batches on one backend in a dedicated thread; runtimes release the GIL, so instances overlap."""

    def __init__(self, name: str, backend: Backend) -> None:
        self.name = name
        self.backend = backend
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    @property
    def device(self):
        return self.backend.device

    def start(self) -> None:
        self._thread = threading.Thread(target=self._work, name=f"infera-{self.name}", daemon=True)
        self._thread.start()

    def call(self, fn: Callable[[], Any]) -> asyncio.Future:
        """Run `fn` on this instance's thread; the returned future resolves on the caller's loop."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._jobs.put((fn, loop, future))
        return future

    def execute(self, requests: list[InferenceRequest], batch_sizes: list[int]) -> asyncio.Future:
        """Run one batch; the future gives (per-request outputs, ComputeTimes).

        A backend may answer one request of the batch with an InferaError in place of its outputs (a python
        model's error response); that request fails alone.
        """
        return self.call(lambda: self._execute(requests, batch_sizes))

    def _execute(self, requests: list[InferenceRequest], batch_sizes: list[int]):
        backend = self.backend
        t0 = time.perf_counter_ns()
        prepared = backend.prepare_requests(requests)
        t1 = time.perf_counter_ns()
        raw = backend.execute(prepared)
        t2 = time.perf_counter_ns()
        outputs = backend.split(raw, batch_sizes)
        t3 = time.perf_counter_ns()
        return outputs, ComputeTimes(t1 - t0, t2 - t1, t3 - t2)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            fn, loop, future = job
            try:
                result = fn()
            except BaseException as exc:  # noqa: BLE001 - every failure travels back to the awaiting request
                loop.call_soon_threadsafe(_set_exception, future, exc)
            else:
                loop.call_soon_threadsafe(_set_result, future, result)

    def stop(self) -> None:
        """Finish queued work, then end the thread (the backend is unloaded by its owner)."""
        if self._thread is not None:
            self._jobs.put(_STOP)
            self._thread.join(timeout=30)
            self._thread = None


def _set_result(future: asyncio.Future, result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _set_exception(future: asyncio.Future, exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
