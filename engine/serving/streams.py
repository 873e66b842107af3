"""The responses of one request to a decoupled model: sent from any thread, read by one asynchronous consumer.

A decoupled model (`model_transaction_policy { decoupled: true }`) answers a request with any number of responses,
from whichever thread it likes, long after `execute` returned; the last one carries the final flag (Triton's
TRITONSERVER_RESPONSE_COMPLETE_FINAL), possibly with no outputs. The front end that holds the request (an SSE
stream, a gRPC stream) reads them in order from a `ResponseStream`; when its client goes away it cancels the
stream, and the model sees `request.is_cancelled()`. The stream also keeps the timings generation metrics need.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.errors import InferaError


class StreamClosed(InferaError):
    """A response was sent after the final one (Triton: the response sender has been closed)."""


@dataclass(slots=True)
class StreamedResponse:
    """One response of a stream: outputs, or an error; `final` on the last (which may carry neither); `parameters`
    are the response's own (an ensemble's sequence parameters)."""

    outputs: dict[str, np.ndarray] | None = None
    error: InferaError | None = None
    final: bool = False
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """A flags-only final: it ends the stream and answers nothing."""
        return self.outputs is None and self.error is None


@dataclass(slots=True)
class StreamTimes:
    """What one finished stream took: the model's first response after the request arrived, and the gaps after."""

    started_ns: int
    responses: int = 0
    first_ns: int = 0  # when the first response was sent (0: none was)
    last_ns: int = 0
    ended_ns: int = 0
    errors: int = 0
    cancelled: bool = False
    failed: bool = False  # the last response was an error

    @property
    def first_response_ns(self) -> int | None:
        return self.first_ns - self.started_ns if self.first_ns else None


class ResponseStream:
    """Responses in the order the model sent them; `send` from any thread, iterate on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None, started_ns: int | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._queue: asyncio.Queue[StreamedResponse] = asyncio.Queue()
        self._lock = threading.Lock()
        self.cancelled = threading.Event()
        self.closed = False  # the final response was sent
        self.ended = False  # ... and has reached the event loop (the `when_final` callbacks have run)
        self._finished = False  # the reader has taken the final response
        self.times = StreamTimes(started_ns or time.monotonic_ns())
        self.on_cancel: Callable[[], None] | None = None  # set by the backend: tell the model
        self.model_version = 0  # the version answering (set by the server)
        self._when_final: list[Callable[[StreamTimes], None]] = []

    def send(
        self,
        outputs: dict[str, np.ndarray] | None = None,
        error: InferaError | None = None,
        *,
        final: bool = False,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        """One response (outputs or an error), or a flags-only final; StreamClosed after the final one."""
        now = time.monotonic_ns()
        with self._lock:
            if self.closed:
                raise StreamClosed("Unable to send response. Response sender has been closed.")
            times = self.times
            if outputs is not None or error is not None:
                times.responses += 1
                times.errors += error is not None
                times.first_ns = times.first_ns or now
                times.last_ns = now
            if final:
                self.closed = True
                times.ended_ns = now
                times.cancelled = self.cancelled.is_set()
                times.failed = error is not None
        self._on_loop(self._deliver, StreamedResponse(outputs, error, final, parameters or {}))

    def fail(self, error: InferaError) -> None:
        """End the stream with `error` unless it has ended already (the model failed or the version stopped)."""
        try:
            self.send(error=error, final=True)
        except StreamClosed:
            pass

    def cancel(self) -> None:
        """The client went away: the model is told (it sees request.is_cancelled()) and stops sending."""
        if self.cancelled.is_set():
            return
        self.cancelled.set()
        if self.on_cancel is not None and not self.closed:
            self.on_cancel()

    def __aiter__(self) -> ResponseStream:
        return self

    async def __anext__(self) -> StreamedResponse:
        if self._queue.empty() and self._finished:
            raise StopAsyncIteration
        response = await self._queue.get()
        if response.final:
            self._finished = True
        return response

    def when_final(self, callback: Callable[[StreamTimes], None]) -> None:
        """Call `callback(times)` on the event loop once the final response has arrived (at once if it has)."""
        if self.ended:
            callback(self.times)
        else:
            self._when_final.append(callback)

    def _deliver(self, response: StreamedResponse) -> None:
        self._queue.put_nowait(response)
        if response.final:
            self.ended = True
            callbacks, self._when_final = self._when_final, []
            for callback in callbacks:
                callback(self.times)

    def _on_loop(self, fn: Callable[..., None], *args: object) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the event loop has closed: nobody reads this stream any more


# Triton's default buckets for nv_inference_first_response_histogram_ms, with finer ones for fast models below them
FIRST_RESPONSE_BUCKETS_MS = (1.0, 5.0, 10.0, 50.0, 100.0, 500.0, 2000.0, 5000.0)


class StreamStats:
    """One decoupled model version's streams: how many are open, what they answered and how fast."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.finished = 0
        self.cancelled = 0
        self.responses = 0
        self.first_response_count = 0
        self.first_response_ns = 0
        self.first_response_buckets = [0] * len(FIRST_RESPONSE_BUCKETS_MS)  # cumulative counts per upper bound
        self.between_count = 0  # gaps between consecutive responses of one stream
        self.between_ns = 0

    def opened(self) -> None:
        self.in_flight += 1

    def closed(self, times: StreamTimes) -> None:
        """A stream's final response: its timings join the totals."""
        self.in_flight -= 1
        self.finished += 1
        self.cancelled += times.cancelled
        self.responses += times.responses
        first = times.first_response_ns
        if first is not None:
            self.first_response_count += 1
            self.first_response_ns += first
            milliseconds = first / 1e6
            for index, bound in enumerate(FIRST_RESPONSE_BUCKETS_MS):
                if milliseconds <= bound:
                    self.first_response_buckets[index] += 1
        if times.responses > 1:
            self.between_count += times.responses - 1
            self.between_ns += times.last_ns - times.first_ns

    def to_dict(self) -> dict:
        """The figures /v2/models/{m}/stats adds for a decoupled model (beside Triton's own)."""
        return {
            "in_flight": self.in_flight,
            "finished": self.finished,
            "cancelled": self.cancelled,
            "responses": self.responses,
            "first_response": {"count": self.first_response_count, "ns": self.first_response_ns},
            "between_responses": {"count": self.between_count, "ns": self.between_ns},
        }
