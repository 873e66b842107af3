"""The read deadlines both servers apply, against a hand clock: stalls, trickles and server pauses."""

from __future__ import annotations

import orjson

from console.hosting.read_deadlines import BodyClock, ReadClock, overdue_reason, timeout_answer
from engine.settings import HttpSettings

SETTINGS = HttpSettings(header_timeout_seconds=10, body_timeout_seconds=30, body_min_bytes_per_second=1000)


def test_it_gives_a_body_that_arrives_steadily_all_the_time_it_needs():
    clock = BodyClock(SETTINGS, now=0.0)
    for second in range(1, 600):  # 100 kB a second for ten minutes
        clock.got(100_000, now=float(second))
        assert clock.due() > second
    assert clock.due() == 599 + 30


def test_it_ends_a_body_that_stops():
    clock = BodyClock(SETTINGS, now=0.0)
    clock.got(50_000, now=1.0)
    assert clock.due() == 31.0  # 30 s of silence after the last bytes, whatever came before


def test_it_ends_a_body_that_trickles_in():
    clock = BodyClock(SETTINGS, now=0.0)
    for second in range(1, 60):  # a byte a second never pauses for long, and still runs out of time
        clock.got(1, now=float(second))
    assert clock.due() == 30 + 59 / 1000
    assert clock.due() < 59


def test_it_starts_afresh_after_the_server_held_the_client_back():
    clock = BodyClock(SETTINGS, now=0.0)
    clock.got(10, now=1.0)
    clock.restart(now=500.0)  # reading was paused while the application was busy
    assert clock.due() == 530.0


class HandClock:
    """A monotonic clock and timers that move only when the test says so."""

    def __init__(self) -> None:
        self.time = 0.0
        self.timers: list[Timer] = []

    def now(self) -> float:
        return self.time

    def call_later(self, delay: float, callback) -> Timer:
        timer = Timer(self.time + delay, callback)
        self.timers.append(timer)
        return timer

    def advance(self, to: float) -> None:
        while due := sorted((t for t in self.timers if not t.cancelled and t.at <= to), key=lambda t: t.at):
            timer = due[0]
            self.timers.remove(timer)
            self.time = timer.at
            timer.callback()
        self.time = to


class Timer:
    def __init__(self, at: float, callback) -> None:
        self.at, self.callback, self.cancelled = at, callback, False

    def cancel(self) -> None:
        self.cancelled = True


def watched(held: list[bool] | None = None) -> tuple[ReadClock, HandClock, list[tuple[str, str]]]:
    hand, overdue = HandClock(), []
    clock = ReadClock(
        SETTINGS,
        now=hand.now,
        call_later=hand.call_later,
        overdue=lambda what, reason: overdue.append((what, reason)),
        held=lambda: bool(held and held[0]),
    )
    return clock, hand, overdue


def test_it_gives_headers_a_fixed_time_however_they_trickle():
    clock, hand, overdue = watched()
    clock.expect_headers()
    clock.watch()  # the chunk that began the request: its clock starts
    for second in range(1, 10):  # a byte a second: each chunk is watched, none moves the deadline
        hand.advance(float(second))
        clock.watch()
    assert overdue == []
    hand.advance(10.0)
    assert overdue == [("headers", "the request headers did not arrive within 10 s")]
    assert clock.expecting is None


def test_it_arms_no_timer_for_a_request_that_arrives_whole():
    clock, hand, overdue = watched()
    clock.expect_headers()
    clock.expect_body()
    clock.got_body(100)
    clock.stop()  # the whole request came in one chunk: watch() was never needed
    clock.watch()
    assert hand.timers == [] and overdue == []


def test_it_ends_a_stalled_body_and_restarts_it_while_the_server_holds_the_client():
    held = [False]
    clock, hand, overdue = watched(held)
    clock.expect_body()
    clock.got_body(10)
    clock.watch()
    held[0] = True  # the application has not read what arrived: reading is paused, the client cannot send
    hand.advance(100.0)
    assert overdue == []
    held[0] = False
    hand.advance(110.0)
    clock.got_body(65536)  # reading resumed: what the client had waiting arrives, then nothing more
    hand.advance(139.0)
    assert overdue == []
    hand.advance(141.0)
    assert [what for what, _ in overdue] == ["body"] and overdue[0][1].startswith("the request body stalled")


def test_it_answers_408_with_the_reason_and_closes():
    reason = overdue_reason("headers", SETTINGS)
    assert reason == "the request headers did not arrive within 10 s"
    head, _, body = timeout_answer(reason).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 Request Timeout\r\n") and b"connection: close" in head
    assert orjson.loads(body) == {"error": reason}
    assert b"content-length: %d" % len(body) in head
    assert overdue_reason("body", SETTINGS) == (
        "the request body stalled (no data for 30 s, or under 1000 bytes/s on average)"
    )
