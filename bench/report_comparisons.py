"""docs/benchmarks.md's sections that measure two ways of serving the same thing: python models isolated and
in process, the sequence batcher's strategies, an ensemble against its steps chained, and traffic policies."""

from __future__ import annotations

import json

from bench.report_cells import figure_cells, served_by, short, table
from bench.targets import (
    Verdict,
    canary_verdict,
    ensemble_row,
    ensemble_verdict,
    python_row,
    python_verdict,
    shadow_verdict,
    traffic_row,
)


def against(ours: dict, theirs: dict, verdict: Verdict | None) -> list[str]:
    """`ours` over `theirs` as table cells: the req/s ratio, the p50 added, and the goal and result of `verdict`."""
    return [
        f"{ours['rps'] / theirs['rps']:.2f}" if theirs["rps"] else "-",
        f"{ours['p50_ms'] - theirs['p50_ms']:+.3f}",
        verdict.goal if verdict else "",
        verdict.status if verdict else "",
    ]


def python_text(run: dict) -> str:
    """Both modes' figures, then isolated over in-process at each body and concurrency, the goal at c=64."""
    rows, ratios = [], []
    for encoding in run["encodings"]:
        for concurrency in run["concurrencies"]:
            isolated, in_process = (python_row(run, mode, encoding, concurrency) for mode in ("isolated", "in-process"))
            for row in (isolated, in_process):
                rows.append([f"{row['model']} ({row['mode']})", encoding, str(concurrency), *figure_cells(row)])
            verdict = python_verdict(run, encoding) if concurrency == 64 else None
            ratios.append([encoding, str(concurrency), *against(isolated, in_process, verdict)])
    launch = served_by(run)
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
            [row["strategy"], f"`{row['model']}`", *figure_cells(row)[:3], spread, ratio, f"{row['mean_batch']:.1f}"]
            + [str(row["errors"]), str(row["wrong"])]
        )
    launch = served_by(run)
    text = (
        f"Measured by `{run['command']}` on {run['date']}. One Infera process under uvicorn ({launch}) serves "
        "three copies of `console/demo/sequences.py`'s ONNX accumulator (`bench/sequence_models.py`; INT32 "
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
        text += "\n\nFirst failures and wrong sums: " + "; ".join(short(e, 200) for e in examples)
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
                [
                    run["paths"][row["path"]],
                    str(concurrency),
                    *figure_cells(row)[:3],
                    f"{min(rates):.0f}–{max(rates):.0f}",
                ]
                + [batches, str(row["errors"]), str(row["wrong"])]
            )
        verdict = ensemble_verdict(run) if concurrency == 64 else None
        ratios.append([str(concurrency), *against(ensemble, chained, verdict)])
    launch = served_by(run)
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
        text += "\n\nFirst failures and wrong labels: " + "; ".join(short(e, 200) for e in examples)
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
            [row["policy"], *figure_cells(row)[:3], f"{min(rates):.0f}–{max(rates):.0f}", ratio]
            + [f"{cpu:.0f}" if cpu else "-", str(row["errors"])]
        )
        shadow = row["shadow"] or {}
        served.append(
            [row["policy"], _served(row, active), _served(row, candidate), f"{row['candidate_share']:.1%}"]
            + [_executions_per_1000(row)]
            + [str(shadow[key]) if shadow else "-" for key in ("copies", "agree", "disagree", "failures")]
        )
    verdicts: dict[str, Verdict] = {"canary": canary_verdict(run), "shadow": shadow_verdict(run)}
    goals = [[policy, *against(traffic_row(run, policy), baseline, verdicts[policy])] for policy in verdicts]
    policies = "; ".join(f"`{name}` `{json.dumps(policy)}`" for name, policy in run["policies"].items())
    launch = served_by(run)
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


def profiles_text(run: dict) -> str:
    """The profiles section: each profile's medians, its rounds, and gRPC against HTTP in the same rounds."""
    rows = []
    for name, figures in run["profiles"].items():
        pairs = zip(figures["http_runs"], figures["grpc_runs"], strict=True)
        rounds = " / ".join(f"{http:.0f}, {grpc:.0f}" for http, grpc in pairs)
        ratio = figures["grpc_rps"] / figures["http_rps"]
        rows.append([name, f"{figures['http_rps']:.0f}", f"{figures['grpc_rps']:.0f}", f"{ratio:.2f}", rounds])
    intro = (
        f"Measured by `{run.get('command', 'python -m bench --sections profiles')}` on {run.get('date', '-')}: "
        f"{run['model']} at {run['connections']} connections, {run['rounds']} rounds of {run['seconds']:g} s per "
        "profile and protocol, the three servers running at once and loaded in turn (bench/profile_runs.py says "
        "what each profile is)."
    )
    headers = ["profile", "HTTP binary req/s", "gRPC req/s", "gRPC / HTTP", "rounds (HTTP, gRPC)"]
    return intro + "\n\n" + table(headers, rows)
