"""When a slow client's request is overdue: the rules both servers apply (uvicorn_limits.py, daphne_limits.py).

Headers: all of them within `header_timeout_seconds` of the request's first byte (of the connection, for a first
request). Body: no pause longer than `body_timeout_seconds`, and, past that first allowance, an average of at least
`body_min_bytes_per_second`, so a body that trickles in is cut off as surely as one that stops. While the server
itself holds the client back (reading paused until the application takes what arrived), the body's clock restarts.
An overdue request is answered 408 (unless its response has begun) and its connection closed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from engine.api import HttpSettings


class BodyClock:
    """The deadline of a body being received, moved by what arrives; times are any monotonic clock's seconds."""

    def __init__(self, settings: HttpSettings, now: float) -> None:
        self.timeout = float(settings.body_timeout_seconds)
        self.min_rate = float(settings.body_min_bytes_per_second)
        self.restart(now)

    def restart(self, now: float) -> None:
        """Start afresh: a new allowance from `now` (the server paused reading, through no fault of the client)."""
        self.start = self.last = now
        self.received = 0

    def got(self, size: int, now: float) -> None:
        self.received += size
        self.last = now

    def due(self) -> float:
        """When the body is overdue unless more of it arrives first."""
        return min(self.last + self.timeout, self.start + self.timeout + self.received / self.min_rate)


class ReadClock:
    """What one connection is reading (nothing, "headers" or "body"), by when, and the one timer that watches it.

    The protocol says what it reads (`expect_headers`, `expect_body`, `got_body`, `stop`) and calls `watch()` after
    each chunk of data. The clock starts, and the timer is armed, only in `watch()` and only if a read is left
    unfinished: a request that arrives in one chunk reads no clock and arms no timer (the hot path stays as it was).
    A read's clock so starts at the end of the chunk that began it. `overdue(what, reason)` is called once when a
    read runs out of time; `held()` says whether the server has paused reading, which restarts a body's allowance.
    """

    def __init__(
        self,
        settings: HttpSettings,
        *,
        now: Callable[[], float],
        call_later: Callable[[float, Callable[[], None]], Any],
        overdue: Callable[[str, str], None],
        held: Callable[[], bool] = lambda: False,
    ) -> None:
        self.settings = settings
        self.now = now
        self.call_later = call_later
        self.overdue = overdue
        self.held = held
        self.expecting: str | None = None
        self.body: BodyClock | None = None
        self._early_bytes = 0  # body bytes that arrived before the body's clock started
        self._headers_due: float | None = None
        self._timer: Any = None

    def expect_headers(self) -> None:
        if self._timer is not None:
            self.stop()
        self.expecting, self.body, self._headers_due = "headers", None, None

    def expect_body(self) -> None:
        if self._timer is not None:
            self.stop()
        self.expecting, self.body, self._early_bytes = "body", None, 0

    def got_body(self, size: int) -> None:
        if self.body is None:
            self._early_bytes += size
        else:
            self.body.got(size, self.now())

    def stop(self) -> None:
        self.expecting = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def watch(self) -> None:
        """After a chunk of data: start the clock and arm the timer if a read is unfinished and none is armed."""
        if self.expecting is None or self._timer is not None:
            return
        now = self.now()
        if self.expecting == "body":
            if self.body is None:
                self.body = BodyClock(self.settings, now)
                self.body.received = self._early_bytes
        elif self._headers_due is None:
            self._headers_due = now + self.settings.header_timeout_seconds
        self._arm(self.due())

    def due(self) -> float:
        if self.expecting == "body" and self.body is not None:
            return self.body.due()
        return self._headers_due if self._headers_due is not None else float("inf")

    def _arm(self, due: float) -> None:
        self._timer = self.call_later(max(due - self.now(), 0.0), self._check)

    def _check(self) -> None:
        self._timer = None
        if self.expecting is None:
            return
        now = self.now()
        if self.held() and self.body is not None:
            self.body.restart(now)
        due = self.due()
        if now < due:
            self._arm(due)
            return
        what = self.expecting
        self.stop()
        self.overdue(what, overdue_reason(what, self.settings))


def overdue_reason(what: str, settings: HttpSettings) -> str:
    """Why a request whose `what` ("headers" or "body") was overdue is refused, in the client's words."""
    if what == "headers":
        return f"the request headers did not arrive within {settings.header_timeout_seconds} s"
    return (
        f"the request body stalled (no data for {settings.body_timeout_seconds} s, or under "
        f"{settings.body_min_bytes_per_second} bytes/s on average)"
    )


def timeout_answer(reason: str) -> bytes:
    """The whole 408 response, with `Connection: close`, saying `reason` in a v2 error body."""
    body = orjson.dumps({"error": reason})
    head = (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\n\r\n" % len(body)
    )
    return head + body
