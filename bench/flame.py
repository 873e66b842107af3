"""py-spy on a serving process: record its stacks while a load runs, and summarise them as top frames.

`Recording(pid, seconds, path)` starts `py-spy record --format raw` (collapsed stacks: one line per distinct stack,
`frame;frame;...;leaf count`) beside the load and waits for it; `top_frames(text, thread)` reads such a file and
returns each frame's own share (the samples where it is the leaf) and cumulative share (the samples where it is on
the stack at all, counted once per sample) of one thread's samples, heaviest first.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PY_SPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


@dataclass(frozen=True)
class Frame:
    """One function of the profile and its shares of the thread's samples (0..1)."""

    name: str
    own: float
    cumulative: float


class Recording:
    """A `py-spy record` of `pid` for `seconds`, written to `path` in py-spy's raw (collapsed) format; `native`
    adds the C frames (the system calls a Python frame's own time otherwise hides)."""

    def __init__(self, pid: int, seconds: float, path: Path, *, rate: int = 100, native: bool = False) -> None:
        self.path = path
        command = [PY_SPY, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds)))]
        command += ["--rate", str(rate), "--format", "raw", "--threads", "--function", "--output", str(path)]
        if native:
            command.append("--native")
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def wait(self, timeout: float = 60.0) -> str:
        """The collapsed stacks once py-spy is done; RuntimeError with its message when it failed."""
        _, errors = self.process.communicate(timeout=timeout)
        if self.process.returncode != 0 or not self.path.exists():
            raise RuntimeError(f"py-spy failed ({self.process.returncode}): {errors.strip()}")
        return self.path.read_text()


def parse_stacks(text: str, thread: str | None = None) -> list[tuple[list[str], int]]:
    """Each stack of `text` (root first) with its sample count; only `thread`'s when given (py-spy's
    `--threads` puts the thread as the root frame, e.g. `process 12:"python" ;thread (0x7f..)`)."""
    stacks = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        path, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = path.split(";")
        if thread is not None:
            if not frames or thread not in frames[0]:
                continue
            frames = frames[1:]
        stacks.append((frames, int(count)))
    return stacks


def top_frames(text: str, thread: str | None = None, limit: int = 20) -> tuple[list[Frame], list[Frame]]:
    """(heaviest by own share, heaviest by cumulative share) of the stacks in `text`."""
    own: dict[str, int] = {}
    cumulative: dict[str, int] = {}
    total = 0
    for frames, count in parse_stacks(text, thread):
        total += count
        if frames:
            own[frames[-1]] = own.get(frames[-1], 0) + count
        for name in set(frames):  # a recursive frame counts once in a sample
            cumulative[name] = cumulative.get(name, 0) + count
    if total == 0:
        return [], []

    def frame(name: str) -> Frame:
        return Frame(name, own.get(name, 0) / total, cumulative.get(name, 0) / total)

    by_own = sorted(own, key=lambda n: own[n], reverse=True)[:limit]
    by_cumulative = sorted(cumulative, key=lambda n: cumulative[n], reverse=True)[:limit]
    return [frame(n) for n in by_own], [frame(n) for n in by_cumulative]


def busiest_thread(text: str) -> str | None:
    """The root frame of the thread with the most samples (the event loop under load)."""
    samples: dict[str, int] = {}
    for frames, count in parse_stacks(text):
        if frames:
            samples[frames[0]] = samples.get(frames[0], 0) + count
    return max(samples, key=lambda n: samples[n]) if samples else None


def markdown(frames: list[Frame], per_request_us: float | None = None) -> list[str]:
    """A markdown table of `frames`; with `per_request_us` (the thread's CPU µs a request) also µs a request."""
    head, rule = "| frame | own | cumulative |", "| --- | --- | --- |"
    if per_request_us is not None:
        head, rule = head + " own µs a request |", rule + " --- |"
    lines = [head, rule]
    for f in frames:
        row = f"| `{f.name}` | {f.own:.1%} | {f.cumulative:.1%} |"
        if per_request_us is not None:
            row += f" {f.own * per_request_us:.1f} |"
        lines.append(row)
    return lines
