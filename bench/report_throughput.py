"""docs/benchmarks.md's sections on serving throughput: the method, HTTP and gRPC, the ratios, the engine in
process, hot swap, dashboards, scale-out and the GPU."""

from __future__ import annotations

import statistics

from bench.report_cells import figure_cells, short, table
from bench.targets import CEILING_LABEL, INFERA_LABELS, MLSERVER_LABEL, echo_of, http_row

LAUNCH_TEXT = {
    "console": "the whole console process (`manage.py serve --server uvicorn|daphne`, SQLite, models imported)",
    "standalone": "the engine-only app (`engine.frontend.standalone:app` under uvicorn or daphne)",
}


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
                                "not available: " + short(row["unavailable"]),
                                "",
                                "",
                                "",
                            ]
                        )
                        continue
                    rows.append([label, encoding, str(concurrency), *figure_cells(row)])
        if rows:
            parts.append(
                f"### {model}\n\n" + table(["server", "body", "conns", "req/s", "p50 ms", "p99 ms", "errors"], rows)
            )
    return "\n\n".join(parts)


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
        text += "\n\nRefused switches: " + "; ".join(short(e) for e in run["switch_errors"])
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
        return "Not available: " + short(results["grpc"][0]["unavailable"])
    rows = []
    for row in results["grpc"]:
        if "unavailable" in row:
            rows.append(
                [
                    row["target"],
                    row["model"],
                    str(row["concurrency"]),
                    "not available: " + short(row["unavailable"]),
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
