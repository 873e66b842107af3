"""docs/benchmarks.md from one run's results: machine, method, targets, and every table."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path

from bench.generation import MARKERS as GENERATION_MARKERS
from bench.targets import (
    CEILING_LABEL,
    INFERA_LABELS,
    MLSERVER_LABEL,
    SECTION_VERDICTS,
    Verdict,
    all_verdicts,
    canary_verdict,
    echo_of,
    ensemble_row,
    ensemble_verdict,
    http_row,
    http_verdicts,
    python_row,
    python_verdict,
    shadow_verdict,
    traffic_row,
)

BENCH_DIR = Path(__file__).resolve().parent
CLOSING_NOTE = BENCH_DIR / "closing_note.md"
# the profile of the request path (bench/request_profile.py) and what it explains, written by hand
PROFILE_NOTE = BENCH_DIR / "request_profile.md"
LAUNCH_TEXT = {
    "console": "the whole console process (`manage.py serve --server uvicorn|daphne`, SQLite, models imported)",
    "standalone": "the engine-only app (`engine.frontend.standalone:app` under uvicorn or daphne)",
}


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def method_text(settings: dict) -> str:
    return (
        f"Everything below comes from one run of `python -m bench` on the machine above, all servers in turn on "
        f"the same {settings['cores']} shared cores, no pinning: a server and its load generator compete for them, "
        "as they would on a small host. Models are built locally from fixed seeds (`bench/models.py`); every "
        "server gets the same ONNX files with one intra-op and one inter-op onnxruntime thread and its batcher on "
        "(Infera: dynamic batching, `max_batch_size` 64 for the MLPs, `max_queue_delay_microseconds` "
        f"{_delays(settings)}, `instance_group` KIND_CPU without a count, so Triton's default of 2 instances "
        "for onnxruntime; "
        "MLServer 1.7.1: adaptive batching, `max_batch_size` 64, `max_batch_time` the same window as Infera's "
        "delay (0 turns its batching off), through "
        f"`bench/mlserver_runtime.py`, `parallel_workers` {settings.get('mlserver_workers', 1)}: 0 runs inference in "
        "its server process, which beat its default of 1 here, 2.4k against 2.0k req/s on mlp_small at 64 "
        "connections). Load comes from wrk with one thread on loopback, each request one sample "
        f"(batch 1); each case runs {settings['runs']} times for {settings['seconds']:g} s after a warm-up at 64 "
        "connections (1 s; a whole run's length for a fresh server), "
        "and each figure is the median of those runs (errors are summed: non-2xx answers plus socket errors). "
        "The HTTP ceiling is `bench/echo_app.py`, a bare ASGI app under the same uvicorn flags that reads the "
        "body and answers a canned response of Infera's size; the direct ceiling is `session.run` in process on "
        "batches of 1 to 64 with the same thread settings. Infera runs as "
        + LAUNCH_TEXT.get(settings["infera_launch"], settings["infera_launch"])
        + ". The load averages in the first table show how much else ran on the machine meanwhile."
    )


def _delays(settings: dict) -> str:
    delays = settings.get("queue_delay_us", {})
    return ", ".join(f"{name} {delay}" for name, delay in delays.items()) or "as in bench/models.py"


def http_tables(results: dict) -> str:
    parts = []
    labels = [CEILING_LABEL, *INFERA_LABELS, MLSERVER_LABEL]
    extra = sorted({r["target"] for r in results.get("http", [])} - set(labels))
    for model in results["settings"]["models"]:
        rows = []
        for label in labels + extra:
            for encoding in ("json", "binary"):
                for concurrency in results["settings"]["concurrencies"]:
                    row = http_row(results, label, model, encoding, concurrency)
                    if row is None:
                        continue
                    if "unavailable" in row:
                        rows.append(
                            [
                                label,
                                encoding,
                                str(concurrency),
                                "not available: " + _short(row["unavailable"]),
                                "",
                                "",
                                "",
                            ]
                        )
                        continue
                    rows.append([label, encoding, str(concurrency), *_figures(row)])
        if rows:
            parts.append(
                f"### {model}\n\n" + table(["server", "body", "conns", "req/s", "p50 ms", "p99 ms", "errors"], rows)
            )
    return "\n\n".join(parts)


def _figures(row: dict) -> list[str]:
    """A measured row's req/s, p50 ms, p99 ms and errors as table cells."""
    return [f"{row['rps']:.0f}", f"{row['p50_ms']:.3f}", f"{row['p99_ms']:.3f}", str(row["errors"])]


def ratio_table(results: dict) -> str:
    rows = []
    settings = results["settings"]
    for label in INFERA_LABELS:
        for model in settings["models"]:
            for encoding in ("json", "binary"):
                for concurrency in settings["concurrencies"]:
                    ours = http_row(results, label, model, encoding, concurrency)
                    if ours is None or "unavailable" in ours:
                        continue
                    cells = [label, model, encoding, str(concurrency)]
                    for other in (MLSERVER_LABEL, CEILING_LABEL, echo_of(label)):
                        theirs = http_row(
                            results, other, model, "json" if other == MLSERVER_LABEL else encoding, concurrency
                        )
                        ok = theirs is not None and "unavailable" not in theirs and theirs["rps"]
                        cells.append(f"{ours['rps'] / theirs['rps']:.2f}" if ok else "-")
                    rows.append(cells)
    if not rows:
        return "No Infera figures in this run (see the HTTP tables for why)."
    headers = ["Infera", "model", "body", "conns", "/ MLServer (JSON)", "/ echo ceiling", "/ same server's echo"]
    return table(headers, rows)


def _short(text: str, limit: int = 140) -> str:
    text = " ".join(str(text).split()).replace("|", "/")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def section_or_reason(run: dict | None, render) -> str:
    if not run:
        return "Not run."
    if "unavailable" in run:
        return f"Not available: {_short(run['unavailable'], 400)}"
    return render(run)


def engine_text(run: dict) -> str:
    note = (
        "At one caller, blocks of 100 requests through the engine alternate with blocks of 100 direct `session.run`"
        " calls of batch 1: the c=1 figures are medians over the blocks, the overhead the median of their"
        " differences.\n\n"
    )
    return note + table(
        [
            "model",
            "callers",
            "engine inf/s",
            "mean batch",
            "direct inf/s (same batch)",
            "ratio",
            "c=1 µs engine",
            "c=1 µs direct",
            "overhead µs",
        ],
        [
            [
                run["model"],
                str(run["concurrency"]),
                f"{run['engine_infer_per_s']:.0f}",
                f"{run['mean_batch']:.1f}",
                f"{run['direct_infer_per_s']:.0f} (batch {run['direct_batch']})",
                f"{run['ratio']:.2f}",
                f"{run['engine_single_us']:.1f}",
                f"{run['direct_single_us']:.1f}",
                f"{run['overhead_us']:.1f}",
            ]
        ],
    )


def hotswap_text(run: dict) -> str:
    rows = [
        [
            "steady (median of 3)",
            f"{run['steady']['rps']:.0f}",
            f"{run['steady']['p50_ms']:.3f}",
            f"{run['steady']['p99_ms']:.3f}",
            str(run["steady"]["errors"]),
        ],
        [
            f"{run['switches']} switches in {run['window_s']:.0f} s",
            f"{run['during']['rps']:.0f}",
            f"{run['during']['p50_ms']:.3f}",
            f"{run['during']['p99_ms']:.3f}",
            str(run["during"]["errors"]),
        ],
    ]
    text = f"Switched through {run['mechanism']}; the slowest switch took {run['switch_s_max'] * 1000:.0f} ms.\n\n"
    text += table(["mlp_small, 64 connections", "req/s", "p50 ms", "p99 ms", "failed"], rows)
    if run["switch_errors"]:
        text += "\n\nRefused switches: " + "; ".join(_short(e) for e in run["switch_errors"])
    return text


def dashboards_text(run: dict) -> str:
    return table(
        ["mlp_small, 64 connections", "req/s (median of 3)"],
        [
            ["no dashboards", f"{run['rps_without']:.0f}"],
            [f"{run['clients']} dashboards open", f"{run['rps_with']:.0f}"],
        ],
    ) + (
        f"\n\nCost: {run['cost'] * 100:.1f}% of throughput; each client received "
        f"{run['snapshots_per_client_s']:.2f} snapshots per second."
    )


def python_text(run: dict) -> str:
    """Both modes' figures, then isolated over in-process at each body and concurrency, the goal at c=64."""
    rows, ratios = [], []
    for encoding in run["encodings"]:
        for concurrency in run["concurrencies"]:
            isolated, in_process = (python_row(run, mode, encoding, concurrency) for mode in ("isolated", "in-process"))
            for row in (isolated, in_process):
                rows.append([f"{row['model']} ({row['mode']})", encoding, str(concurrency), *_figures(row)])
            verdict = python_verdict(run, encoding) if concurrency == 64 else None
            ratios.append(
                [
                    encoding,
                    str(concurrency),
                    f"{isolated['rps'] / in_process['rps']:.2f}" if in_process["rps"] else "-",
                    f"{isolated['p50_ms'] - in_process['p50_ms']:+.3f}",
                    verdict.goal if verdict else "",
                    verdict.status if verdict else "",
                ]
            )
    launch = "the console, `manage.py serve`" if run["launch"] == "console" else "the engine-only app"
    return (
        f"Measured by `{run['command']}` on {run['date']}. Both models are served by one Infera process under "
        f"uvicorn ({launch}) from the same `bench/add_sub_model.py` (Triton's add_sub: OUTPUT0 = INPUT0 + INPUT1, "
        "OUTPUT1 = INPUT0 - INPUT1, INT32 [16]) with `max_batch_size` 8, one instance and dynamic batching with no "
        "queue delay; `py_add_sub` runs in a stub process (the default), `py_add_sub_inproc` inside the server "
        '(`EXECUTION_MODE` "in_process"), and nothing else differs. Each request is `simple`\'s body (batch 1), '
        f"sent by wrk with one thread; each figure is the median of {run['runs']} runs of {run['seconds']:g} s, "
        "the two models' runs alternating ABBA after a warm-up of each at 64 connections. The stub is one more "
        "process on the same shared cores as the server and wrk.\n\n"
        + table(["model", "body", "conns", "req/s", "p50 ms", "p99 ms", "errors"], rows)
        + "\n\n"
        + table(["body", "conns", "isolated / in-process req/s", "p50 added ms", "goal", "result"], ratios)
    )


def sequences_text(run: dict) -> str:
    """The three strategies' figures, each next to the baseline's, and any failure or wrong sum quoted."""
    rows = run["rows"]
    baseline = next((r for r in rows if r["model"] == "accumulator_stateless"), None)
    cells = []
    for row in rows:
        ratio = f"{row['rps'] / baseline['rps']:.2f}" if baseline and baseline["rps"] else "-"
        rates = [r["rps"] for r in row["runs"]] or [0.0]
        spread = f"{min(rates):.0f}–{max(rates):.0f}"
        cells.append(
            [row["strategy"], f"`{row['model']}`", *_figures(row)[:3], spread, ratio, f"{row['mean_batch']:.1f}"]
            + [str(row["errors"]), str(row["wrong"])]
        )
    launch = "the console, `manage.py serve`" if run["launch"] == "console" else "the engine-only app"
    text = (
        f"Measured by `{run['command']}` on {run['date']}. One Infera process under uvicorn ({launch}) serves "
        "three copies of `console/demo_sequences.py`'s ONNX accumulator (`bench/sequence_models.py`; INT32 "
        "`INPUT` [1] → `OUTPUT`, the running sum), each with `max_batch_size` 64 on one instance so that "
        f"{run['concurrency']} sequences are live at once: `direct {{ }}` (64 slots, Triton's defaults: a batch "
        "goes as soon as the instance is free, up to the highest occupied slot, fillers included), `oldest` "
        f"(`max_candidate_sequences` 64, `preferred_batch_size` {run['preferred_batch_sizes']}, "
        f"`max_queue_delay_microseconds` {run['queue_delay_us']}), both with START/READY controls and the "
        "implicit state `STATE_IN`/`STATE_OUT` kept by the server; and the baseline without sequence batching, "
        "the same graph with START, READY and STATE_IN sent by the client as ordinary inputs (so its bodies "
        "carry three more tensors) and the dynamic batcher set as oldest is. The load is "
        "`bench/sequence_runs.py`, not wrk (a sequence's bodies change step by step): "
        f"{run['concurrency']} workers on keep-alive connections, each running sequences of {run['steps']} "
        "steps back to back (START on the first, END on the last, one request in flight), for "
        f"{run['seconds']:g} s a run, a sequence cut short at the deadline ending with an END step; every "
        "answer is checked against the running sum the client keeps. Each figure is the median of "
        f"{run['runs']} runs (the runs' req/s column gives their range), the three models' runs rotating "
        "after a 1 s warm-up of each; failures (no answer or not 200) and wrong sums are summed over the runs; "
        "the mean batch is the server's requests per execution over the measured runs.\n\n"
        + table(
            [
                "sequence batching",
                "model",
                "req/s",
                "p50 ms",
                "p99 ms",
                "runs' req/s",
                "/ none",
                "mean batch",
                "failed",
                "wrong sums",
            ],
            cells,
        )
    )
    examples = [f"{row['strategy']}: {example}" for row in rows for example in row["examples"]]
    if examples:
        text += "\n\nFirst failures and wrong sums: " + "; ".join(_short(e, 200) for e in examples)
    return text + (
        f"\n\nOn this {run['cores']}-core machine the server process, its onnxruntime session (one thread) and the "
        "load generator (one Python process on uvloop) share the cores, so every figure is bounded by the HTTP "
        "path, the batchers' bookkeeping and the load generator, not by the graph; other work on the machine moves "
        "a whole run by 10% or more, so rows whose ranges of runs overlap are not told apart here."
    )


def ensemble_text(run: dict) -> str:
    """Both paths' figures at each concurrency, then the ensemble over the chained steps, the goal at c=64."""
    steps = list(run["queue_delay_us"])
    cells, ratios = [], []
    for concurrency in run["concurrencies"]:
        ensemble, chained = (ensemble_row(run, path, concurrency) for path in ("ensemble", "chained"))
        for row in (ensemble, chained):
            rates = [r["rps"] for r in row["runs"]] or [0.0]
            batches = " / ".join(f"{row['mean_batch'][step]:.1f}" for step in steps)
            cells.append(
                [run["paths"][row["path"]], str(concurrency), *_figures(row)[:3], f"{min(rates):.0f}–{max(rates):.0f}"]
                + [batches, str(row["errors"]), str(row["wrong"])]
            )
        verdict = ensemble_verdict(run) if concurrency == 64 else None
        ratios.append(
            [
                str(concurrency),
                f"{ensemble['rps'] / chained['rps']:.2f}" if chained["rps"] else "-",
                f"{ensemble['p50_ms'] - chained['p50_ms']:+.3f}",
                verdict.goal if verdict else "",
                verdict.status if verdict else "",
            ]
        )
    launch = "the console, `manage.py serve`" if run["launch"] == "console" else "the engine-only app"
    delays = ", ".join(
        f"`{step}` {'no dynamic batching' if delay is None else f'{delay} µs'}"
        for step, delay in run["queue_delay_us"].items()
    )
    text = (
        f"Measured by `{run['command']}` on {run['date']}. One Infera process under uvicorn ({launch}) serves the "
        "demo pipeline's four models as the console seeds them (`bench/ensemble_models.py`): `digits_pipeline`, "
        "the ensemble of `digits_preprocess` (python: a PNG → FP32 `PIXELS` [64]), `digits` (the ONNX MLP, "
        f"version {run['digits_version']} as `train_digits_onnx` trains it, with the bench's one intra-op and one "
        "inter-op onnxruntime thread) and `digits_postprocess` (python: → `LABEL`, `TOP3`, `TOP3_CLASSES`); each "
        "step has `max_batch_size` 64, one instance and dynamic batching with the demo's queue delays "
        f"({delays}), the python steps in their stub processes. A request is one image, a held-out digits sample "
        f"drawn {run['scale']}× larger as a greyscale PNG ({run['images']} distinct images), sent as BYTES "
        f"`IMAGE` [1, 1] in Triton's binary tensor extension (bodies of about {run['body_bytes']} bytes), and counts "
        "once its `LABEL` is back: the ensemble path is one infer of `digits_pipeline`; the chained path is three "
        "infers in turn on the caller's connection, `PIXELS` and `probabilities` asked for as binary data and sent "
        "on to the next step as they came back. The load is `bench/ensemble_runs.py`, not wrk (each step's body "
        f"is the last step's answer): {' and '.join(map(str, run['concurrencies']))} callers, each with one "
        "keep-alive connection and one image in flight, labelling images back to back for "
        f"{run['seconds']:g} s a run; every `LABEL` is checked against the digit `digits` gives in process for the "
        "grid the preprocess step reads from that PNG (images whose top two probabilities lie within "
        f"{run['margin']:g} left out). Each figure is the median of {run['runs']} runs (the runs' images/s "
        "column gives their range), the two paths' runs alternating ABBA after a 1 s warm-up of each at 64 "
        "callers; failures (no answer, not 200, or no tensor to send on) and wrong labels are summed over the "
        "runs; the mean batches are each step's requests per execution over the measured runs, "
        + " / ".join(f"`{step}`" for step in steps)
        + ".\n\n"
        + table(
            ["path", "callers", "images/s", "p50 ms", "p99 ms", "runs' images/s", "mean batch", "failed", "wrong"],
            cells,
        )
        + "\n\n"
        + table(["callers", "ensemble / chained images/s", "ensemble − chained p50 ms", "goal", "result"], ratios)
    )
    examples = [f"{row['path']} c={row['concurrency']}: {e}" for row in run["rows"] for e in row["examples"]]
    if examples:
        text += "\n\nFirst failures and wrong labels: " + "; ".join(_short(e, 200) for e in examples)
    return text + (
        f"\n\nOn this {run['cores']}-core machine the server process, the two python stub processes, the "
        "onnxruntime session (one thread) and the load generator (one Python process on uvloop) share the cores, "
        "so every figure is bounded by the HTTP path, the steps' Python and the load generator rather than by the "
        "models' compute; other work on the machine moves a whole run by 10% or more."
    )


def traffic_text(run: dict) -> str:
    """The three policies' figures, what each version served and the shadow compared, then the targets."""
    active, candidate = run["active_version"], run["candidate"]
    baseline = traffic_row(run, "active")
    figures, served = [], []
    for row in run["rows"]:
        rates = [r["rps"] for r in row["runs"]] or [0.0]
        ratio = f"{row['rps'] / baseline['rps']:.2f}" if baseline and baseline["rps"] else "-"
        cpu = row.get("cpu_us_per_answer")
        figures.append(
            [row["policy"], *_figures(row)[:3], f"{min(rates):.0f}–{max(rates):.0f}", ratio]
            + [f"{cpu:.0f}" if cpu else "-", str(row["errors"])]
        )
        shadow = row["shadow"] or {}
        served.append(
            [row["policy"], _served(row, active), _served(row, candidate), f"{row['candidate_share']:.1%}"]
            + [_executions_per_1000(row)]
            + [str(shadow[key]) if shadow else "-" for key in ("copies", "agree", "disagree", "failures")]
        )
    verdicts: dict[str, Verdict] = {"canary": canary_verdict(run), "shadow": shadow_verdict(run)}
    goals = [
        [
            policy,
            f"{row['rps'] / baseline['rps']:.2f}" if baseline["rps"] else "-",
            f"{row['p50_ms'] - baseline['p50_ms']:+.3f}",
            verdicts[policy].goal,
            verdicts[policy].status,
        ]
        for policy, row in ((p, traffic_row(run, p)) for p in verdicts)
    ]
    policies = "; ".join(f"`{name}` `{json.dumps(policy)}`" for name, policy in run["policies"].items())
    launch = "the console, `manage.py serve`" if run["launch"] == "console" else "the engine-only app"
    return (
        f"Measured by `{run['command']}` on {run['date']}. One Infera process under uvicorn ({launch}) serves "
        "`mlp_small` (`max_batch_size` 64, one instance, dynamic batching with `max_queue_delay_microseconds` "
        f"{run['queue_delay_us']}, one onnxruntime thread) with both of its versions READY: version {active} active, "
        f"version {candidate} the candidate, the same weights (so every answer can be compared). Each policy is set "
        "as an operator sets it, `PUT /api/models/mlp_small/traffic` with an API token, and a run starts once `GET` "
        "on that URL shows the reconciler has put it in force in the engine: "
        f"{policies}. Under `canary` each request that names no version is drawn at random, 90 to version {active} "
        f"and 10 to version {candidate}; under `shadow` version {active} answers and a copy of every request then runs "
        f"on version {candidate}, its outputs compared with the answer's and thrown away. Nothing else differs: the "
        f"same process, batcher and threads. The load is wrk with one thread, {run['concurrency']} connections and "
        f"`mlp_small`'s JSON body (batch 1); each figure is the median of {run['runs']} runs of {run['seconds']:g} s "
        "(the runs' req/s column gives their range), the three policies' runs rotating (ABC, BCA, CAB) after a "
        "warm-up of each. What each version served is the server's own statistics (`/v2/models/mlp_small/stats`: "
        "inferences, and their mean batch, summed over the measured runs); the shadow's counters are the engine's "
        "comparison, read back from `GET /api/models/mlp_small/traffic` once the last copies of each run had been "
        "compared (a copy agrees when its outputs match the answer's within 1e-5). The server's CPU is its process's "
        "user and system time over the measured runs (and the shadow's catch-up) per request answered.\n\n"
        + table(
            ["policy", "req/s", "p50 ms", "p99 ms", "runs' req/s", "/ active", "server CPU µs per answer", "errors"],
            figures,
        )
        + "\n\n"
        + table(
            [
                "policy",
                f"version {active} requests (mean batch)",
                f"version {candidate} requests (mean batch)",
                f"version {candidate}'s share",
                "executions per 1000 answers",
                "shadow copies",
                "agreed",
                "disagreed",
                "failed",
            ],
            served,
        )
        + "\n\n"
        + table(["policy", "/ active req/s", "p50 added ms", "goal", "result"], goals)
        + "\n\nA canary's candidate gets a tenth of the requests, so it forms its own, smaller batches on its own "
        "instance: the server runs more executions for the same answers (the executions column), each with its fixed "
        "cost and its hand-offs between the event loop and a worker thread. A shadow runs every request twice, the "
        f"copies batched on the candidate. On this {run['cores']}-core machine the server and wrk share the cores, so "
        "that extra work comes straight out of the answers' throughput; other work on the machine moves a whole run "
        "by 10% or more, the server's CPU per answer much less."
    )


def _executions_per_1000(row: dict) -> str:
    """Executions of both versions per 1000 requests answered (a shadow's copies ran but answered no one)."""
    inferences, executions = (sum(counts[i] for counts in row["served"].values()) for i in (0, 1))
    answered = inferences - (row["shadow"] or {}).get("copies", 0)
    return f"{executions / answered * 1000:.0f}" if answered > 0 else "-"


def _served(row: dict, version: int) -> str:
    inferences, executions = row["served"].get(str(version), [0, 0])
    return f"{inferences} ({inferences / executions:.1f})" if executions else str(inferences)


def gpu_text(gpu: dict | None) -> str:
    if not gpu:
        return (
            "Not run yet (no GPU). `bench/gpu.sh` runs it on a GPU machine and writes `gpu_results.json` under "
            "`$OUT`; `python -m bench --gpu-results that/gpu_results.json` keeps it in docs/benchmarks-gpu.json "
            "and puts its tables and targets here."
        )
    return gpu.get("markdown", "")


def grpc_table(results: dict) -> str:
    """gRPC ModelInfer rows (h2load), Infera next to MLServer, with the same models and connections."""
    if "grpc" not in results:
        return "Not run in this bench (`--sections` without `grpc`)."
    if "unavailable" in results["grpc"][0] and len(results["grpc"]) == 1:
        return "Not available: " + _short(results["grpc"][0]["unavailable"])
    rows = []
    for row in results["grpc"]:
        if "unavailable" in row:
            rows.append(
                [
                    row["target"],
                    row["model"],
                    str(row["concurrency"]),
                    "not available: " + _short(row["unavailable"]),
                    "",
                    "",
                    "",
                ]
            )
            continue
        rows.append(
            [
                row["target"],
                row["model"],
                str(row["concurrency"]),
                f"{row['rps']:.0f}",
                f"{row['p50_ms']:.3f}",
                f"{row['p99_ms']:.3f}",
                f"{row['errors']} ({row['errors_counted']})",
            ]
        )
    return (
        "Loaded by h2load (`-m 1`: one request in flight per connection, as wrk), one prepared ModelInferRequest "
        "frame with raw input contents; median of the runs.\n\n"
        + table(["server", "model", "conns", "req/s", "p50 ms", "p99 ms", "errors"], rows)
    )


def cluster_text(run: dict) -> str:
    """The scale-out section: throughput per number of replicas, and how long a switch takes to reach them all."""
    base = run["rows"][0]["rps"] or 1.0
    rows = [
        [str(r["replicas"]), f"{r['rps']:.0f}", f"{r['rps'] / base:.2f}×", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}"]
        + [str(r["errors"])]
        for r in run["rows"]
    ]
    switches = run["switch_s"]
    return (
        "Three `manage.py serve` replicas behind HAProxy (`deploy/local.py`, with a PostgreSQL database and a "
        f"redis-server of their own), mlp_small JSON at c={run['concurrency']} through the balancer, {run['runs']} "
        f"runs of {run['seconds']:.0f} s (median); with 1 and 2 replicas the others are in HAProxy's maintenance. "
        f"On {run['cores']} cores (load average {run['load_average']} at the end) one replica is CPU-bound already "
        "and HAProxy and wrk share the same cores, so more replicas give little or nothing here: they pay off with "
        "cores (or a GPU) of their own each, as a Kubernetes Deployment spreads them over nodes.\n\n"
        + table(["replicas", "req/s", "vs 1", "p50 ms", "p99 ms", "errors"], rows)
        + "\n\nA switch of the active version (`POST .../versions/N/activate` through replica-1), timed until each "
        f"of the three replicas, asked directly, answers with the new version: over {len(switches)} switches p50 "
        f"{statistics.median(switches) * 1000:.0f} ms, max {max(switches) * 1000:.0f} ms (the goal: within 2 s)."
    )


PYTHON_HEADING = "Python models: isolated vs in-process"
SEQUENCES_HEADING = "Sequence batcher: direct, oldest and no sequence batching"
ENSEMBLE_HEADING = "Ensembles: digits_pipeline vs the client chaining its steps"
TRAFFIC_HEADING = "Traffic policies: no policy, canary 90/10 and shadow on mlp_small"
CLUSTER_HEADING = "Scale-out: 1, 2 and 3 replicas behind HAProxy"
GPU_HEADING = "GPU path (bench/gpu.sh)"
# the headings each `--sections` entry fills; a run of some sections rewrites only theirs (see write_outputs)
SECTION_HEADINGS = {
    "direct": ("Direct ceiling: onnxruntime session.run in process",),
    "http": ("HTTP: throughput and latency", "Ratios"),
    "grpc": ("gRPC: throughput and latency",),
    "engine": ("Engine in process (issue 3)",),
    "hotswap": ("Hot swap under load",),
    "dashboards": ("Dashboards open under load",),
    "python": (PYTHON_HEADING,),
    "sequences": (SEQUENCES_HEADING,),
    "ensemble": (ENSEMBLE_HEADING,),
    "traffic": (TRAFFIC_HEADING,),
    "cluster": (CLUSTER_HEADING,),
    "gpu": (GPU_HEADING,),  # written by `python -m bench --gpu-results FILE`, measured on a GPU machine
}


def section_renderers(results: dict) -> dict[str, Callable[[], str]]:
    """Every `## ` section of docs/benchmarks.md after the title, heading to what renders its body, in order."""
    renderers: dict[str, Callable[[], str]] = {
        "Machine": lambda: table(["", ""], [[k, _short(v)] for k, v in results["system"].items()]),
        "Method": lambda: method_text(results["settings"]),
        "Targets": lambda: table(TARGET_HEADERS, [target_cells(v) for v in all_verdicts(results)]),
        "Direct ceiling: onnxruntime session.run in process": lambda: table(
            ["model", "batch", "inferences/s", "µs per call"],
            [
                [r["model"], str(r["batch"]), f"{r['infer_per_s']:.0f}", f"{r['call_us']:.1f}"]
                for r in results.get("direct", [])
            ],
        ),
        "HTTP: throughput and latency": lambda: http_tables(results),
        "Ratios": lambda: ratio_table(results),
        "gRPC: throughput and latency": lambda: grpc_table(results),
        "Engine in process (issue 3)": lambda: section_or_reason(results.get("engine"), engine_text),
        "Hot swap under load": lambda: section_or_reason(results.get("hotswap"), hotswap_text),
        "Dashboards open under load": lambda: section_or_reason(results.get("dashboards"), dashboards_text),
        PYTHON_HEADING: lambda: section_or_reason(results.get("python"), python_text),
        SEQUENCES_HEADING: lambda: section_or_reason(results.get("sequences"), sequences_text),
        ENSEMBLE_HEADING: lambda: section_or_reason(results.get("ensemble"), ensemble_text),
        TRAFFIC_HEADING: lambda: section_or_reason(results.get("traffic"), traffic_text),
        CLUSTER_HEADING: lambda: section_or_reason(results.get("cluster"), cluster_text),
        GPU_HEADING: lambda: gpu_text(results.get("gpu")),
    }
    if PROFILE_NOTE.exists():
        renderers["Where the time goes"] = lambda: PROFILE_NOTE.read_text().strip()
    if CLOSING_NOTE.exists():
        renderers["Closing note"] = lambda: CLOSING_NOTE.read_text().strip()
    return renderers


def render_markdown(results: dict) -> str:
    """The whole docs/benchmarks.md."""
    parts = [
        "# Benchmarks",
        f"Generated by `{results['command']}` on {results['date']}. Do not edit by hand: run it again.",
    ]
    parts += [f"## {heading}\n\n{render()}" for heading, render in section_renderers(results).items()]
    return "\n\n".join(parts) + "\n"


TARGET_HEADERS = ["target", "goal", "measured", "result"]


def target_cells(verdict: Verdict) -> list[str]:
    """A verdict as a row of the Targets table."""
    return [verdict.target, verdict.goal, _short(verdict.measured, 200), verdict.status]


def with_target_rows(targets: str, verdicts: list[Verdict]) -> str:
    """The Targets section's text with each verdict's row replaced, or added after the table's last row; a text
    without the table stays as it is (the next whole run writes it)."""
    lines = targets.split("\n")
    rows = [i for i, line in enumerate(lines) if line.startswith("| ")]
    if not rows or lines[rows[0]] != "| " + " | ".join(TARGET_HEADERS) + " |":
        return targets
    where = {lines[i][2:].split(" | ")[0]: i for i in rows[2:]}
    added = []
    for verdict in verdicts:
        row = "| " + " | ".join(target_cells(verdict)) + " |"
        if verdict.target in where:
            lines[where[verdict.target]] = row
        else:
            added.append(row)
    lines[rows[-1] + 1 : rows[-1] + 1] = added
    return "\n".join(lines)


def sections_of(markdown: str) -> tuple[str, dict[str, str]]:
    """The text before the first `## ` heading, and each `## ` section (its heading included) by its heading."""
    preamble, *blocks = re.split(r"^(?=## )", markdown, flags=re.MULTILINE)
    return preamble, {block.splitlines()[0][3:].strip(): block.rstrip("\n") for block in blocks}


def splice_sections(markdown: str, texts: dict[str, str], order: list[str]) -> str:
    """`markdown` with the `## ` sections named in `texts` replaced; one it lacks goes where `order` puts it."""
    preamble, sections = sections_of(markdown)
    for heading, text in texts.items():
        block = f"## {heading}\n\n{text}"
        if heading in sections:
            sections[heading] = block
            continue
        later = order[order.index(heading) + 1 :] if heading in order else []
        following = next((h for h in later if h in sections), None)
        headings = list(sections)
        at = headings.index(following) if following else len(headings)
        sections = dict([*list(sections.items())[:at], (heading, block), *list(sections.items())[at:]])
    return preamble + "\n\n".join(sections.values()) + "\n"


def print_summary(results: dict) -> None:
    """The targets table on stdout."""
    print("\nTargets")
    for v in all_verdicts(results):
        print(f"  {v.status:4}  {v.target:52} {v.goal:34} {v.measured}")


# where the sections other tools write begin (bench.generation's, and the hand-written ones after it): a whole run
# renders the sections before it and keeps the rest of the report as it was
KEPT_FROM = GENERATION_MARKERS[0]


def kept_tail(markdown_path: Path) -> str:
    """The existing report's text from KEPT_FROM on, after a blank line; empty when it has none."""
    text = markdown_path.read_text() if markdown_path.exists() else ""
    at = text.find(KEPT_FROM)
    return "" if at < 0 else "\n" + text[at:].rstrip("\n") + "\n"


def write_outputs(
    results: dict, markdown_path: Path | None, results_folder: Path, only: list[str] | None = None
) -> None:
    """latest.json always; with the markdown, published.json too (what --render-only renders again).

    A run of `only` some sections keeps the rest of an existing report: it rewrites just those sections'
    headings of the markdown and the Targets rows they decide alone (`SECTION_VERDICTS`; the title and the other
    rows stay the last whole run's) and merges its figures into an existing published.json.
    """
    results_folder.mkdir(parents=True, exist_ok=True)
    (results_folder / "latest.json").write_text(json.dumps(results, indent=1, default=str))
    if markdown_path is None:
        return
    published = results_folder / "published.json"
    if only is None or not markdown_path.exists():
        published.write_text(json.dumps(results, indent=1, default=str))
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(render_markdown(results) + kept_tail(markdown_path))
        return
    if published.exists():
        merged = json.loads(published.read_text()) | {key: results[key] for key in only if key in results}
        published.write_text(json.dumps(merged, indent=1, default=str))
    renderers = section_renderers(results)
    chosen = {heading: renderers[heading]() for key in only for heading in SECTION_HEADINGS[key]}
    markdown = markdown_path.read_text()
    verdicts = [v for key in only if key in SECTION_VERDICTS for v in SECTION_VERDICTS[key](results)]
    if "http" in only:  # the HTTP targets this run measured (a server or model it left out keeps its row)
        verdicts += [v for label in INFERA_LABELS for v in http_verdicts(results, label) if v.status != "N/A"]
    targets = sections_of(markdown)[1].get("Targets")
    if verdicts and targets is not None:
        chosen["Targets"] = with_target_rows(targets.partition("\n")[2].strip("\n"), verdicts)
    markdown_path.write_text(splice_sections(markdown, chosen, list(renderers)))
