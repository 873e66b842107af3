"""The LLM section's load: OpenAI chat completions streamed over SSE (aiohttp), closed loops of N streams.

Every server gets the same request: one short prompt asking for a long story, `max_tokens` 64, temperature 0,
streamed with `stream_options.include_usage`. A stream's tokens are its `usage.completion_tokens` when the server
sends usage, else its content chunks (one per token on each server measured here).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field

import aiohttp

MAX_TOKENS = 64
STORY = "Write a long story about a lighthouse keeper who finds a map in a bottle."


def story_request(model: str, max_tokens: int = MAX_TOKENS, system: str | None = None, user: str = STORY) -> dict:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    return {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@dataclass
class StreamRun:
    """One level of concurrency: streams finished, tokens, times to the first token."""

    streams: int
    seconds: float = 0.0
    tokens: int = 0
    finished: int = 0
    failures: int = 0
    short: int = 0  # streams that ended before max_tokens (an end-of-sequence token)
    ttft_s: list[float] = field(default_factory=list)
    error: str = ""

    def row(self) -> dict:
        ttft = sorted(self.ttft_s)
        p99 = ttft[min(len(ttft) - 1, round(0.99 * (len(ttft) - 1)))] if ttft else None
        return {
            "streams": self.streams,
            "seconds": round(self.seconds, 2),
            "tokens": self.tokens,
            "tokens_per_s": self.tokens / self.seconds if self.seconds else 0.0,
            "ttft_p50_s": statistics.median(ttft) if ttft else None,
            "ttft_p99_s": p99,
            "finished": self.finished,
            "failures": self.failures,
            "short": self.short,
            "error": self.error,
        }


async def one_stream(session: aiohttp.ClientSession, url: str, body: dict, run: StreamRun) -> None:
    started = time.perf_counter()
    first: float | None = None
    chunks = 0
    usage: int | None = None
    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                run.failures += 1
                run.error = f"HTTP {response.status}: {(await response.text())[:200]}"
                return
            async for raw in response.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                event = json.loads(data)
                for choice in event.get("choices") or []:
                    if (choice.get("delta") or {}).get("content"):
                        chunks += 1
                        if first is None:
                            first = time.perf_counter()
                if event.get("usage"):
                    usage = event["usage"].get("completion_tokens")
    except (TimeoutError, aiohttp.ClientError, ValueError) as error:
        run.failures += 1
        run.error = f"{type(error).__name__}: {error}"
        return
    tokens = usage if usage is not None else chunks
    run.tokens += tokens
    run.short += tokens < body["max_tokens"]
    run.finished += 1
    if first is not None:
        run.ttft_s.append(first - started)


async def drive(base_url: str, body: dict, streams: int, seconds: float) -> StreamRun:
    """`streams` closed loops for at least `seconds` (each makes one request at least; those under way finish)."""
    run = StreamRun(streams)
    url = f"{base_url}/v1/chat/completions"
    timeout = aiohttp.ClientTimeout(total=900)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        deadline = time.perf_counter() + seconds

        async def loop() -> None:
            while True:
                await one_stream(session, url, body, run)
                if time.perf_counter() >= deadline or run.failures > streams:
                    return

        started = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(streams)))
        run.seconds = time.perf_counter() - started
    return run


def measure(base_url: str, body: dict, streams: int, seconds: float) -> dict:
    return asyncio.run(drive(base_url, body, streams, seconds)).row()


def first_token_s(base_url: str, body: dict) -> float | None:
    """One stream's time to its first token (the prefix-cache runs)."""
    return measure(base_url, body, 1, 0.0)["ttft_p50_s"]
