"""Model instances: one backend object bound to one device, executed by its own worker thread."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from engine.backends.base import Backend
from engine.serving.stats import ComputeTimes
from engine.types import BatchOutputs, InferenceRequest

_STOP = object()
# a batch's answer: (per-request outputs, ComputeTimes, BatchOutputs or None) and None, or None and the error it
# failed with
BatchDone = Callable[[Any, BaseException | None], None]
# a batch runs on the event loop itself, with no hand-off to the worker thread and back, when its instance is idle
# and the CPU time of the backend's own execution is typically under this: about what the hand-off costs the loop
# (a queue put, waking the thread, the GIL changing hands while the thread prepares and splits the batch,
# call_soon_threadsafe). Measured on the 2-core bench machine at 64 connections (bench.cpu_split, the console under
# uvicorn, the same build with the batches inline and on the threads): 180-280 µs of the loop's CPU a batch, on
# `simple` (batches of 8: 61 against 94 µs a request, 16.3-17.3k against 9.1-9.8k requests a second) and mlp_small
# (batches of about 28: 61 against 66 µs a request, 16.3-16.5k against 13.4-13.5k). Only the backend's `execute`
# counts: it is what a thread overlaps with the loop (the runtime releases the GIL); preparing the batch and
# splitting its outputs are Python that holds the GIL, so they stall the loop as long on a thread as inline
INLINE_EXECUTE_NS = 250_000
# A batch that is all its model has in flight, at a time when its model serves one request at a time, runs inline
# up to this dearer cost: the loop has nothing else to do meanwhile, so the hand-off buys no overlap and costs two
# wake-ups of another core (about 45 µs more a request on the 2-core bench machine than on one pinned core). The
# bound is how long such a batch may keep the loop from reading a request that arrives meanwhile
ALONE_EXECUTE_NS = 500_000
# What a batch costs is the median of the last COST_WINDOW executions' CPU time (inline and on the thread apart):
# one execution may cost many times the usual (a page fault, a collection, the machine's neighbours: `simple`'s
# batch of 8, 15 µs at the median inline, measured over 60 µs in 1-3% of batches and up to 400 µs, in bursts), and
# a running average of them carried cheap models over the threshold and onto the thread for good. A real change of
# cost moves the median within half a window
COST_WINDOW = 8
# An execution's CPU time measured on the worker thread may overstate what it would cost on the loop (the thread's
# own wake-up, cold caches, the GIL changing hands: `simple`'s batch of 8 measured up to 215 µs there under load
# against 14 µs inline), so the two are measured apart and the choice reads the inline one. An instance on its
# thread whose executions cost under PROBE_FACTOR times the threshold there runs one idle batch inline to measure
# it: at once when it has never run inline, then every PROBE_EVERY batches on the thread (batches may have shrunk).
# A probe holds the loop at most once every PROBE_EVERY batches, for what the thread measured at most
PROBE_FACTOR = 4
PROBE_EVERY = 64
# Linux's prctl option that names the calling thread (at most 15 bytes), as top -H, /proc and py-spy show it
_PR_SET_NAME = 15


class CostWindow:
    """The CPU time of an instance's last COST_WINDOW executions in one place (inline, or on its thread)."""

    __slots__ = ("_costs", "_oldest", "typical")

    def __init__(self) -> None:
        self._costs: list[int] = []
        self._oldest = 0
        self.typical: int | None = None  # their median (the lower one of an even count); None before the first

    def add(self, cost: int) -> None:
        costs = self._costs
        if len(costs) < COST_WINDOW:
            costs.append(cost)
        else:
            costs[self._oldest] = cost
            self._oldest = (self._oldest + 1) % COST_WINDOW
        self.typical = sorted(costs)[(len(costs) - 1) // 2]


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_set_thread_option = _prctl()


def name_os_thread(name: str) -> None:
    """Give the calling thread `name` in the OS too (Python 3.11 names its threads for Python only), so the CPU an
    instance's compute takes shows under the instance's name in top -H and /proc/<pid>/task/*/comm."""
    if _set_thread_option is not None:
        _set_thread_option(_PR_SET_NAME, name.encode("utf-8", "replace")[:15], 0, 0, 0)


class ModelInstance:
    """Runs batches on one backend in a dedicated thread; runtimes release the GIL, so instances overlap.

    A very cheap model's batch runs inline on the event loop instead (see INLINE_EXECUTE_NS), decided from the
    average of this instance's measured executions, for backends that allow it (`Backend.runs_on_loop`) on the CPU.
    """

    def __init__(
        self,
        name: str,
        backend: Backend,
        *,
        inline_below_ns: int = INLINE_EXECUTE_NS,
        alone_below_ns: int = ALONE_EXECUTE_NS,
        cost_clock: Callable[[], int] = time.thread_time_ns,
        inline_clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.name = name
        self.backend = backend
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        # what an execution costs: on the worker thread its CPU time (the wall clock there also counts the waits for
        # the GIL that the event loop holds, which the loop would not have); inline the wall clock, which is the
        # loop's own time there, and far cheaper to read: the thread's CPU clock is a system call, 1-10 µs a read
        # under load on the bench machine (py-spy: half the own time of _execute, 2.3 µs a request on `simple`)
        self._cost_clock = cost_clock
        self._inline_clock = inline_clock
        # the backend computes on this process's CPU cores, GIL released (not on a GPU, not in a python stub)
        self.on_cpu_cores = backend.runs_on_loop and not backend.device.is_gpu
        self.inline_below_ns = inline_below_ns if self.on_cpu_cores else 0
        self.alone_below_ns = max(alone_below_ns, self.inline_below_ns) if self.on_cpu_cores else 0
        # executions' CPU time, inline and on the thread
        self._inline_costs = CostWindow()
        self._thread_costs = CostWindow()
        self._since_probe = 0  # batches run on the thread since the last one inline
        self._on_thread = 0  # jobs handed to the worker thread and not finished
        self._slices_rows = type(backend).split is Backend.split

    @property
    def device(self):
        return self.backend.device

    def start(self) -> None:
        self._thread = threading.Thread(target=self._work, name=f"infera-{self.name}", daemon=True)
        self._thread.start()

    def call(self, fn: Callable[[], Any]) -> asyncio.Future:
        """Run `fn` on this instance's thread; the returned future resolves on the caller's loop."""
        future = asyncio.get_running_loop().create_future()
        self._on_thread += 1
        self._jobs.put((fn, None, future, None))
        return future

    @property
    def queued_jobs(self) -> int:
        """Jobs handed to the worker thread and not finished (the one running among them)."""
        return self._on_thread

    @property
    def inline_ns(self) -> int | None:
        """What a batch costs inline, as far as measured there (None before the first)."""
        return self._inline_costs.typical

    @property
    def thread_ns(self) -> int | None:
        """What a batch costs on the thread, as far as measured there (None before the first)."""
        return self._thread_costs.typical

    @property
    def execute_ns(self) -> int | None:
        """What a batch costs as far as measured: inline once it has run there, else on the thread."""
        return self.inline_ns if self.inline_ns is not None else self.thread_ns

    @property
    def runs_inline(self) -> bool:
        """Whether the next batch runs on the event loop: nothing running on the thread, and measured cheap
        inline, or due a probe (see PROBE_FACTOR)."""
        return self.would_run_inline(alone=False)

    def would_run_inline(self, alone: bool) -> bool:
        """Whether a batch runs on the event loop; `alone` when it is all its model has in flight at a time of one
        request at a time, which allows a dearer batch (see ALONE_EXECUTE_NS)."""
        if self._on_thread or not self.inline_below_ns:
            return False
        below = self.alone_below_ns if alone else self.inline_below_ns
        inline, thread = self.inline_ns, self.thread_ns
        if inline is not None and inline < below:
            return True
        if thread is None or thread >= PROBE_FACTOR * below:
            return False
        return inline is None or self._since_probe >= PROBE_EVERY

    def run(
        self, requests: list[InferenceRequest], batch_sizes: list[int], done: BatchDone, alone: bool = False
    ) -> bool:
        """Run one batch and call `done(result, error)` on the event loop with (per-request outputs, ComputeTimes,
        the batch's outputs before the split when they were sliced by rows, else None).

        Inline, `done` has been called when this returns True; on the thread it is called later, from the loop,
        with no future in between (the dispatcher's hot path). A backend may answer one request of the batch with
        an InferaError in place of its outputs (a python model's error response); that request fails alone.
        `alone`: the batch is all its model has in flight, at a time of one request at a time.
        """
        if self.would_run_inline(alone):
            self._since_probe = 0
            try:
                result = self._execute(requests, batch_sizes, inline=True)
            except Exception as exc:  # noqa: BLE001 - every failure travels back to the batch's requests
                done(None, exc)
            else:
                done(result, None)
            return True
        self._on_thread += 1
        self._since_probe += 1
        self._jobs.put((self._execute, (requests, batch_sizes), done, asyncio.get_running_loop()))
        return False

    def execute(self, requests: list[InferenceRequest], batch_sizes: list[int]) -> asyncio.Future:
        """Run one batch; the future gives (per-request outputs, ComputeTimes)."""
        future = asyncio.get_running_loop().create_future()

        def done(result: Any, error: BaseException | None) -> None:
            if not future.done():
                future.set_exception(error) if error is not None else future.set_result(result[:2])

        self.run(requests, batch_sizes, done)
        return future

    def _execute(self, requests: list[InferenceRequest], batch_sizes: list[int], inline: bool = False):
        backend = self.backend
        t0 = time.perf_counter_ns()
        prepared = backend.prepare_requests(requests)
        clock = self._inline_clock if inline else self._cost_clock  # of the backend's execute alone (see __init__)
        cost_start = clock()
        t1 = time.perf_counter_ns()
        raw = backend.execute(prepared)
        t2 = time.perf_counter_ns()
        cost = clock() - cost_start
        outputs = backend.split(raw, batch_sizes)
        t3 = time.perf_counter_ns()
        # the default split slices every output by rows, in request order: the batch's outputs stay whole beside it
        whole = BatchOutputs(raw) if self._slices_rows and len(batch_sizes) > 1 else None
        (self._inline_costs if inline else self._thread_costs).add(cost)
        return outputs, ComputeTimes(t1 - t0, t2 - t1, t3 - t2), whole

    def _work(self) -> None:
        name_os_thread(self.name)
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            fn, args, target, loop = job
            try:
                result = fn(*args) if args is not None else fn()
            except BaseException as exc:  # noqa: BLE001 - every failure travels back to the awaiting request
                result, error = None, exc
            else:
                error = None
            if loop is None:  # call(): a future of the loop that made it
                target.get_loop().call_soon_threadsafe(self._future_done, target, result, error)
            else:
                loop.call_soon_threadsafe(self._batch_done, target, result, error)

    def _future_done(self, future: asyncio.Future, result: Any, error: BaseException | None) -> None:
        self._on_thread -= 1
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(result)

    def _batch_done(self, done: BatchDone, result: Any, error: BaseException | None) -> None:
        self._on_thread -= 1
        done(result, error)

    def stop(self) -> None:
        """Finish queued work, then end the thread (the backend is unloaded by its owner)."""
        if self._thread is not None:
            self._jobs.put(_STOP)
            self._thread.join(timeout=30)
            self._thread = None
