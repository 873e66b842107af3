"""A stand-in for an instance's CPU-time clock, moved only by the test backends that say what a batch cost."""

from __future__ import annotations


class FakeClock:
    """The CPU-time clock of an instance: moves only when a backend says its batch took time."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now
