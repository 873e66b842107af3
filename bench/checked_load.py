"""What the bench's own asyncio load generators share (sequences, ensemble): one keep-alive HTTP/1.1 connection per
worker with one request in flight on it, run on uvloop when it is installed, and a tally of the answers checked.

wrk sends one fixed body; these loads change their bodies request by request and read every answer back.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import urllib.request
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from bench.engine_inproc import inference_counts
from bench.wrk import median_run

T = TypeVar("T")
EXAMPLES = 5  # failures and wrong answers quoted in the report, per run


@dataclass(frozen=True)
class Reply:
    """One answer: its status, its headers (names in lower case) and its body."""

    status: int
    headers: dict[bytes, bytes]
    body: bytes


class Connection:
    """One keep-alive HTTP/1.1 connection that POSTs a body and reads the status and body back."""

    def __init__(self, host: str, port: int, path: str = "/") -> None:
        self.host, self.port, self.path = host, port, path
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, body: bytes) -> tuple[int, bytes]:
        """POST a JSON body to the connection's path; (status, body)."""
        reply = await self.send(self.path, body, {"Content-Type": "application/json"})
        return reply.status, reply.body

    async def send(self, path: str, body: bytes, headers: dict[str, str]) -> Reply:
        """POST `body` with `headers` to `path`, opening the connection first when it is closed."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self.writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        status_line, *lines = (await self.reader.readuntil(b"\r\n\r\n"))[:-4].split(b"\r\n")
        fields = {}
        for line in lines:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip()
        if b"content-length" not in fields:
            raise ConnectionError("an answer without Content-Length")
        answer = await self.reader.readexactly(int(fields[b"content-length"]))
        return Reply(int(status_line.split(b" ", 2)[1]), fields, answer)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def run_load(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run one load generator's coroutine to its end on a fresh event loop (uvloop's when installed)."""
    loop_factory = None
    if importlib.util.find_spec("uvloop"):
        import uvloop

        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(coroutine)


@dataclass
class Tally:
    """What the workers of one run saw: each checked answer's latency (s), failures and wrong answers."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    wrong: int = 0
    examples: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.examples) < EXAMPLES:
            self.examples.append(text)

    def figures(self, elapsed: float) -> dict:
        """The fields of a CheckedRun that lasted `elapsed` seconds."""
        latencies = np.asarray(self.latencies) * 1e6
        p50, p99 = np.percentile(latencies, [50, 99]) if latencies.size else (0.0, 0.0)
        return {
            "requests": len(self.latencies),
            "duration_us": int(elapsed * 1e6),
            "p50_us": float(p50),
            "p99_us": float(p99),
            "errors": self.errors,
            "wrong": self.wrong,
            "examples": self.examples,
        }


@dataclass
class CheckedRun:
    """One run: answered requests, latency percentiles (µs), failed requests and wrong answers."""

    requests: int
    duration_us: int
    p50_us: float
    p99_us: float
    errors: int  # no answer, or not a 200
    wrong: int  # a 200 with the wrong answer
    examples: list[str] = field(default_factory=list)

    @property
    def rps(self) -> float:
        return self.requests / (self.duration_us / 1e6) if self.duration_us else 0.0


def median_checked_run(runs: list[CheckedRun]) -> dict:
    """wrk's median of the runs, with wrong answers summed and the first examples kept."""
    return median_run(runs) | {
        "wrong": sum(r.wrong for r in runs),
        "examples": [e for r in runs for e in r.examples][:EXAMPLES],
    }


def served_counts(base_url: str, model: str) -> tuple[int, int]:
    """The model's (inference_count, execution_count) from the server's statistics."""
    with urllib.request.urlopen(f"{base_url}/v2/models/{model}/stats", timeout=30) as response:
        return inference_counts(json.loads(response.read()), model)
