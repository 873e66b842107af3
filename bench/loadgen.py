"""A small HTTP/1.1 load generator for machines without wrk: keep-alive connections POSTing one body.

Each worker process runs its share of the connections on one asyncio loop; latencies come back per request so
percentiles are exact. Standard library and numpy only, so it runs wherever the engine does.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from dataclasses import dataclass

import numpy as np

REQUEST_TIMEOUT_S = 30.0  # an answer slower than this counts as failed, and the connection is opened anew


@dataclass
class LoadResult:
    """Throughput, latency percentiles (ms) and failures of one load run."""

    requests: int
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float
    mean_ms: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def _request_bytes(host: str, port: int, path: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if length:
        await reader.readexactly(length)
    return status


async def _connection(host: str, port: int, raw: bytes, deadline: float, latencies: list[float]) -> int:
    errors = 0
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            try:
                writer.write(raw)
                status = await asyncio.wait_for(_read_response(reader), REQUEST_TIMEOUT_S)
            except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
                errors += 1
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
                continue
            if 200 <= status < 300:
                latencies.append(time.perf_counter() - start)
            else:
                errors += 1
    finally:
        writer.close()
    return errors


async def _worker_main(host, port, raw, connections, seconds) -> tuple[np.ndarray, int]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    errors = await asyncio.gather(*(_connection(host, port, raw, deadline, latencies) for _ in range(connections)))
    return np.asarray(latencies, dtype=np.float64), sum(errors)


def _worker(args: tuple) -> tuple[np.ndarray, int]:
    return asyncio.run(_worker_main(*args))


def run_load(
    url_host: str,
    port: int,
    path: str,
    body: bytes,
    headers: dict[str, str],
    connections: int,
    seconds: float,
    processes: int = 1,
) -> LoadResult:
    """POST `body` on `connections` keep-alive connections for `seconds`, spread over `processes` processes."""
    raw = _request_bytes(url_host, port, path, headers, body)
    processes = max(1, min(processes, connections))
    shares = [connections // processes + (1 if i < connections % processes else 0) for i in range(processes)]
    jobs = [(url_host, port, raw, share, seconds) for share in shares]
    if processes == 1:
        results = [_worker(jobs[0])]
    else:
        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            results = pool.map(_worker, jobs)
    latencies = np.concatenate([r[0] for r in results]) if results else np.zeros(0)
    errors = sum(r[1] for r in results)
    if latencies.size == 0:
        return LoadResult(0, errors or connections, seconds, 0.0, 0.0, 0.0)
    p50, p99 = np.percentile(latencies, [50, 99]) * 1000
    # each worker counts its own `seconds` from when it started, so that is the window every request fell in
    return LoadResult(int(latencies.size), errors, seconds, float(p50), float(p99), float(latencies.mean() * 1000))
