"""`python -m bench.generation`: the demo generator's streams at 1, 8 and 32 at once, with continuous batching on
and off, over /v2/models/<m>/generate_stream: aggregate tokens/s and the median time to the first token.

One Infera process (the engine alone) serves two copies of `text_generator` trained once here: one batching its
sequences continuously (new requests join the running batch at the next step), one serving a sequence at a time.
Each stream is a closed loop: a prompt, 48 tokens at temperature 0, the next prompt. The section between the
`generation` markers of docs/benchmarks.md is rewritten with the table, and the goal's verdict (at 32 streams,
continuous batching ≥ 8x the single-stream rate).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.infera import infera_spec
from bench.servers import ROOT, ServerProcess, free_port
from bench.sse_client import SSEConnection

STREAMS = (1, 8, 32)
MAX_TOKENS = 48
GOAL = 8.0  # aggregate tokens/s at 32 streams over one stream's, with continuous batching
MARKERS = ("<!-- generation -->", "<!-- /generation -->")
PROMPTS = ("The module", "A function", "When the", "Python is", "The class", "An object", "If the", "The list")
MODELS = {"continuous": "text_generator", "one at a time": "text_generator_serial"}


@dataclass
class GenerationRun:
    """One level of concurrency on one model: streams finished, tokens, first-token times."""

    model: str
    streams: int
    seconds: float
    tokens: int = 0
    finished: int = 0
    failures: int = 0
    first_token_s: list[float] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def ttft_ms(self) -> float | None:
        return statistics.median(self.first_token_s) * 1000 if self.first_token_s else None


async def one_stream(connection: SSEConnection, host: str, path: str, prompt: str, run: GenerationRun) -> None:
    body = json.dumps({"text_input": prompt, "stream": True, "max_tokens": MAX_TOKENS, "temperature": 0}).encode()
    started = time.perf_counter()
    count = await connection.post(host, path, body)
    if count.status != 200 or count.errors:
        run.failures += 1
        return
    run.tokens += count.events  # an event per token (generate_stream sends no event for a flags-only final)
    if count.first_event_at is not None:
        run.first_token_s.append(count.first_event_at - started)
    run.finished += 1


async def drive(base_url: str, model: str, streams: int, seconds: float) -> GenerationRun:
    """`streams` closed loops for `seconds`, each on its own keep-alive connection (streams under way at the end
    finish and count)."""
    run = GenerationRun(model, streams, seconds)
    address = base_url.removeprefix("http://")
    host, port = address.rsplit(":", 1)
    path = f"/v2/models/{model}/generate_stream"
    deadline = time.perf_counter() + seconds

    async def caller(index: int) -> None:
        connection = await SSEConnection.open(host, int(port))
        try:
            turn = 0
            while time.perf_counter() < deadline:
                await one_stream(connection, address, path, PROMPTS[(index + turn) % len(PROMPTS)], run)
                turn += 1
        finally:
            connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(caller(i) for i in range(streams)))
    run.seconds = time.perf_counter() - started
    return run


def write_repository(folder: Path, train_seconds: float) -> Path:
    """Both copies of the generator, trained once (the same weights)."""
    from console.demo.generator import GENERATOR_CONFIG, MODEL_NAME, train_generator, write_generator

    model, _ = train_generator(seconds=train_seconds)
    continuous = write_generator(folder, model)
    serial = folder / MODELS["one at a time"]
    shutil.copytree(continuous, serial)
    config = GENERATOR_CONFIG.replace(f'name: "{MODEL_NAME}"', f'name: "{serial.name}"')
    (serial / "config.pbtxt").write_text(
        config + 'parameters { key: "continuous_batching" value { string_value: "false" } }\n'
    )
    return folder


def verdict(runs: dict[tuple[str, int], GenerationRun]) -> tuple[float, str]:
    """Aggregate tokens/s at 32 continuous streams over one continuous stream's, and PASS or MISS."""
    single = runs[("continuous", 1)].tokens_per_s
    ratio = runs[("continuous", 32)].tokens_per_s / single if single else 0.0
    return ratio, "PASS" if ratio >= GOAL else "MISS"


def render(runs: dict[tuple[str, int], GenerationRun], seconds: float, load: tuple[float, float] | None = None) -> str:
    """The section: the table and the verdict; `load`, the 1-minute load average before and after the run."""
    ratio, result = verdict(runs)
    measured = f" (load average {load[0]:.1f} before, {load[1]:.1f} after)" if load else ""
    lines = [
        MARKERS[0],
        "## Generation (the demo generator, streamed)",
        "",
        f"`python -m bench.generation`: `text_generator` over `/v2/models/<m>/generate_stream`, {MAX_TOKENS} tokens "
        f"at temperature 0 per stream, each stream a closed loop for {seconds:.0f} s; the same weights served with "
        "continuous batching and one sequence at a time (one intra-op torch thread: the server's loop and the "
        "stub's reader need the other core). The streams are driven by bench.sse_client, which counts events "
        f"without decoding them. One run on the shared 2-core machine{measured}.",
        "",
        "| batching | streams | tokens/s | median time to first token (ms) | streams finished | failures |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for (mode, streams), run in runs.items():
        ttft = f"{run.ttft_ms:.1f}" if run.ttft_ms is not None else "–"
        lines.append(f"| {mode} | {streams} | {run.tokens_per_s:.0f} | {ttft} | {run.finished} | {run.failures} |")
    lines += [
        "",
        f"Goal: at 32 streams, aggregate tokens/s ≥ {GOAL:.0f}× the single-stream rate (continuous batching): "
        f"**{ratio:.1f}× — {result}**.",
        MARKERS[1],
    ]
    return "\n".join(lines)


def write_section(document: Path, section: str) -> None:
    """Replace the generation section of `document` (append it when it has none)."""
    text = document.read_text() if document.exists() else ""
    start, end = text.find(MARKERS[0]), text.find(MARKERS[1])
    if start >= 0 and end > start:
        text = text[:start] + section + text[end + len(MARKERS[1]) :]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    document.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.generation", description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per level (default 10)")
    parser.add_argument("--train-seconds", type=float, default=20.0, help="training time of the generator")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="infera-generation-") as folder:
        repository = write_repository(Path(folder) / "models", args.train_seconds)
        spec = infera_spec("uvicorn", free_port(), repository, Path(folder) / "home", "standalone")
        spec.ready_models = list(MODELS.values())
        runs: dict[tuple[str, int], GenerationRun] = {}
        with ServerProcess(spec, Path(folder) / "logs") as server:
            for mode, model in MODELS.items():
                asyncio.run(drive(server.spec.base_url, model, 1, 2.0))  # warm-up: the stub's first steps
                for streams in STREAMS:
                    runs[(mode, streams)] = asyncio.run(drive(server.spec.base_url, model, streams, args.seconds))
                    run = runs[(mode, streams)]
                    print(f"{mode:>14} {streams:>3} streams: {run.tokens_per_s:8.0f} tokens/s, TTFT {run.ttft_ms} ms")
    section = render(runs, args.seconds, (load_before, os.getloadavg()[0]))
    print(section)
    if not args.no_write:
        write_section(args.out, section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
