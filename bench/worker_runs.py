"""`python -m bench.worker_runs`: `serve --workers 1` against `--workers 2` at 64 connections, in one run.

One console home (SQLite, no Redis: the default install) serves `simple` and `mlp_small`; the two servers take turns
(1, 2, 1, 2 ... for each model), so a busy neighbour on the shared machine weighs on both alike. Each round is one
wrk run of `--seconds`; the figures are the medians, with the load average before each round and the CPU seconds
the whole server (supervisor and workers) used per request; CPU per request times requests per second is how many
cores the server kept busy. On a shared machine that tells a cheaper request from a bigger share of the cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
from pathlib import Path

import psutil

from bench.infera import ConsoleHome
from bench.models import MLP_SMALL, SIMPLE, write_repository
from bench.payloads import json_payload
from bench.servers import PYTHON, ServerProcess, ServerSpec, free_port
from bench.system import load_average, usable_cores
from bench.wrk import WrkScripts, run_wrk

CONCURRENCY = 64
WORKERS = (1, 2)
MODELS = (SIMPLE, MLP_SMALL)


def server_cpu_seconds(pid: int) -> float:
    """CPU time of a server and every process under it (its workers, their model stubs)."""
    root = psutil.Process(pid)
    processes = [root, *root.children(recursive=True)]
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def measure(workdir: Path, seconds: float, rounds: int) -> dict:
    repository = write_repository(workdir / "repository", [m.name for m in MODELS])
    home = ConsoleHome(workdir / "home")
    home.prepare(repository)
    scripts = WrkScripts()
    results: dict[str, dict[int, list[dict]]] = {m.name: {n: [] for n in WORKERS} for m in MODELS}
    servers = {}
    with contextlib.ExitStack() as running:
        for count in WORKERS:  # one server per worker count, both up for every round
            port = free_port()
            command = [PYTHON, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-seed"]
            command += ["--no-access-log", "--grpc-port", "0", "--workers", str(count)]
            spec = ServerSpec(f"infera-workers-{count}", command, port, env=home.env, ready_models=["mlp_small"])
            servers[count] = running.enter_context(ServerProcess(spec, workdir / "logs"))
        for model in MODELS:
            payload = json_payload(model, repository)
            script = scripts.script(f"workers-{model.name}", payload.body, payload.headers)
            for _ in range(rounds):
                for count, server in servers.items():
                    load = load_average()
                    before = server_cpu_seconds(server.process.pid)
                    run = run_wrk(f"{server.spec.base_url}/v2/models/{model.name}/infer", script, CONCURRENCY, seconds)
                    used = server_cpu_seconds(server.process.pid) - before
                    results[model.name][count].append(
                        {
                            "rps": run.rps,
                            "p50_ms": run.p50_us / 1000,
                            "p99_ms": run.p99_us / 1000,
                            "errors": run.errors,
                            "cpu_us_per_request": used / run.requests * 1e6 if run.requests else None,
                            "load_before": load,
                        }
                    )
                    print(
                        f"  {model.name} workers={count}: {run.rps:.0f} req/s, p99 {run.p99_us / 1000:.1f} ms, "
                        f"{run.errors} errors (load {load})",
                        flush=True,
                    )
    return {"cores": usable_cores(), "seconds": seconds, "rounds": rounds, "results": results}


def table(figures: dict) -> str:
    """The Markdown table of docs/benchmarks.md."""
    lines = [
        "| model | workers | req/s | vs 1 | p50 ms | p99 ms | CPU µs/request | cores busy | errors | load before |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, by_count in figures["results"].items():
        base = statistics.median(r["rps"] for r in by_count[min(by_count)])
        for count, rows in by_count.items():
            rps = statistics.median(r["rps"] for r in rows)
            cpu = [r["cpu_us_per_request"] for r in rows if r["cpu_us_per_request"] is not None]
            loads = ", ".join(r["load_before"].split()[0] for r in rows)
            p50 = statistics.median(r["p50_ms"] for r in rows)
            p99 = statistics.median(r["p99_ms"] for r in rows)
            lines.append(
                f"| {name} | {count} | {rps:,.0f} | {rps / base:.2f}× | {p50:.2f} | {p99:.2f} | "
                f"{statistics.median(cpu):.0f} | {statistics.median(cpu) * rps / 1e6:.2f} | "
                f"{sum(r['errors'] for r in rows)} | {loads} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of one wrk run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per model and worker count, interleaved")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="infera-bench-workers-") as folder:
        figures = measure(Path(folder), args.seconds, args.rounds)
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2))
    print(table(figures))
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
