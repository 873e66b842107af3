"""`python -m bench`: measure the ceilings, Infera and MLServer in one run; print and write docs/benchmarks.md."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import cluster_runs, llm, mlserver_peer, profile_runs, traffic_runs
from bench.direct import measure_direct
from bench.engine_inproc import measure_engine
from bench.grpc_runs import H2LOAD, GrpcTarget, measure_grpc_target, wait_for_grpc
from bench.http_runs import HttpPlan, Target, measure_target, write_echo_responses
from bench.infera import LAUNCH_MODES, infera_spec, resolve_mode
from bench.models import MLP_SMALL, MODELS, write_repository
from bench.multiplex import memory_sections
from bench.report import print_summary, write_outputs
from bench.sequence_runs import CONCURRENCY, STEPS
from bench.served_sections import (
    RESULTS,
    dashboards_section,
    ensemble_section,
    hotswap_section,
    python_section,
    sequences_section,
    with_models,
)
from bench.servers import ROOT, NotAvailable, ServerProcess, ServerSpec, echo_spec, free_port
from bench.system import load_average, system_info, usable_cores
from bench.wrk import WRK, WrkScripts

# the last GPU run (bench/gpu.sh on a GPU machine), kept in git: no machine that runs `make bench` has to have a GPU
GPU_RESULTS = ROOT / "docs" / "benchmarks-gpu.json"
HTTP_TARGETS = ("echo-uvicorn", "echo-daphne", "infera-uvicorn", "infera-daphne", "infera-default", "mlserver")
DEFAULT_TARGETS = HTTP_TARGETS
# the tuned profile: the bench's configs (two instances of one intra-op thread, a 100 µs window), no access log;
# the default one: Infera as `make serve` runs it (access log on) with the configs a user uploads untuned
PROFILES = ("tuned", "default")
PROFILE_TARGETS = {"tuned": ("infera-uvicorn", "infera-daphne"), "default": ("infera-default",)}
SECTIONS = (
    "direct",
    "http",
    "grpc",
    "profiles",
    "engine",
    "hotswap",
    "dashboards",
    "python",
    "sequences",
    "ensemble",
    "traffic",
    "cluster",
    "llm",
    "footprint",
    "multiplex",
)


def csv(kind):
    return lambda text: [kind(part) for part in text.split(",") if part]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2 s per run: a smoke run, not figures to publish")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per wrk run (default 5)")
    parser.add_argument("--runs", type=int, default=3, help="runs per case; figures are their median (default 3)")
    parser.add_argument("--models", type=csv(str), default=["simple", "mlp_small", "mlp_large"])
    parser.add_argument("--concurrency", type=csv(int), default=[1, 16, 64])
    parser.add_argument("--encodings", type=csv(str), default=["json", "binary"])
    parser.add_argument("--targets", type=csv(str), default=list(DEFAULT_TARGETS), help=f"of {', '.join(HTTP_TARGETS)}")
    parser.add_argument(
        "--sections",
        type=csv(str),
        default=list(SECTIONS),
        help=f"of {', '.join(SECTIONS)}; a run of some rewrites only their sections of --out",
    )
    parser.add_argument(
        "--profile",
        type=csv(str),
        default=list(PROFILES),
        help="tuned (the bench's configs, no access log), default (as `make serve` runs, configs as uploaded), or both",
    )
    parser.add_argument("--infera-launch", choices=LAUNCH_MODES, default="auto")
    parser.add_argument(
        "--mlserver-workers",
        type=int,
        default=0,
        help="MLServer parallel_workers; 0 (inference in its server process) beat its default of 1 on 2 cores",
    )
    parser.add_argument(
        "--queue-delay-us",
        type=int,
        default=None,
        help="the MLPs' max_queue_delay_microseconds; MLServer's max_batch_time is always the same window",
    )
    parser.add_argument("--engine-model", default="mlp_medium", help="model of the in-process engine run")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="rewrite the markdown from bench/results/latest.json, measure nothing",
    )
    parser.add_argument(
        "--gpu-results",
        type=Path,
        help="publish a bench/gpu.sh run (its gpu_results.json) into docs/, measure nothing",
    )
    parser.add_argument("--setup-peers", action="store_true", help="(re)create MLServer's virtualenv first")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = 2.0
    for name in args.models + [args.engine_model]:
        if name not in MODELS:
            parser.error(f"unknown model '{name}' ({', '.join(MODELS)})")
    for name in args.targets:
        if name not in HTTP_TARGETS:
            parser.error(f"unknown target '{name}' ({', '.join(HTTP_TARGETS)})")
    for name in args.sections:
        if name not in SECTIONS:
            parser.error(f"unknown section '{name}' ({', '.join(SECTIONS)})")
    for name in args.profile:
        if name not in PROFILES:
            parser.error(f"unknown profile '{name}' ({', '.join(PROFILES)})")
    left_out = {t for p in PROFILES if p not in args.profile for t in PROFILE_TARGETS[p]}
    args.targets = [t for t in args.targets if t not in left_out]
    return args


def http_targets(args: argparse.Namespace, repository: Path, workdir: Path, echo_dir: Path) -> list[Target]:
    """The servers of the HTTP matrix, each built only when its turn comes."""
    mode = args.infera_launch
    models = args.models
    builders = {
        "echo-uvicorn": Target("echo-uvicorn", True, lambda: echo_spec("uvicorn", free_port(), echo_dir)),
        "echo-daphne": Target("echo-daphne", True, lambda: echo_spec("daphne", free_port(), echo_dir)),
        "infera-uvicorn": Target(
            "infera-uvicorn",
            True,
            lambda: with_models(infera_spec("uvicorn", free_port(), repository, workdir / "uvicorn", mode), models),
        ),
        "infera-daphne": Target(
            "infera-daphne",
            True,
            lambda: with_models(infera_spec("daphne", free_port(), repository, workdir / "daphne", mode), models),
        ),
        "infera-default": Target(
            "infera-default",
            True,
            lambda: with_models(default_spec(free_port(), workdir / "default", mode), models, "infera-default"),
        ),
        "mlserver": Target(
            "mlserver",
            False,
            lambda: mlserver_peer.mlserver_spec(
                workdir / "mlserver", repository, args.models, free_port(), args.mlserver_workers
            ),  # its max_batch_time is each model's max_queue_delay_microseconds in `repository`
        ),
    }
    return [builders[name] for name in args.targets]


def default_spec(port: int, workdir: Path, mode: str, grpc_port: int = 0) -> ServerSpec:
    """Infera as `make serve` runs it (access log on) over the configs a user uploads untuned (the default profile)."""
    uploaded = write_repository(RESULTS / "repository-uploaded", uploaded=True).resolve()
    return infera_spec("uvicorn", port, uploaded, workdir, mode, grpc_port, access_log=True)


def profiles_section(args, repository: Path, workdir: Path) -> dict:
    """The tuned and the default profile (and the untuned configs without the access log) interleaved."""
    mode = args.infera_launch
    uploaded = write_repository(RESULTS / "repository-uploaded", uploaded=True).resolve()
    specs = {
        "tuned": lambda port, grpc: infera_spec("uvicorn", port, repository, workdir / "p-tuned", mode, grpc),
        "default": lambda port, grpc: default_spec(port, workdir / "p-default", mode, grpc),
        "uploaded, no access log": lambda port, grpc: infera_spec(
            "uvicorn", port, uploaded, workdir / "p-uploaded", mode, grpc
        ),
    }
    rounds = max(4, args.runs + 1)
    return profile_runs.measure_profiles(specs, repository, workdir, RESULTS / "logs", args.seconds, rounds)


def grpc_section(args, repository: Path, workdir: Path) -> list[dict]:
    """Infera's gRPC front end (the console under uvicorn) and MLServer's, one after the other."""
    if not shutil.which(H2LOAD):
        raise NotAvailable("h2load is not installed: apt-get install nghttp2-client")
    rows: list[dict] = []
    folder = workdir / "grpc-frames"
    folder.mkdir(parents=True, exist_ok=True)
    ports: dict[str, int] = {}
    peers = []
    if "tuned" in args.profile:
        port = ports["infera-grpc"] = free_port()
        spec = infera_spec("uvicorn", free_port(), repository, workdir / "grpc", args.infera_launch, port)
        peers.append(("infera-grpc", with_models(spec, args.models, "infera-grpc"), True))
    if "default" in args.profile:
        ports["infera-grpc-default"] = free_port()
        spec = default_spec(free_port(), workdir / "grpc-default", args.infera_launch, ports["infera-grpc-default"])
        peers.append(("infera-grpc-default", with_models(spec, args.models, "infera-grpc-default"), True))
    if "mlserver" in args.targets:
        mlserver_grpc = ports["mlserver-grpc"] = free_port()
        try:
            mlserver = mlserver_peer.mlserver_spec(
                workdir / "mlserver-grpc", repository, args.models, free_port(), args.mlserver_workers, mlserver_grpc
            )
            mlserver.name = "mlserver-grpc"
            peers.append(("mlserver-grpc", mlserver, False))
        except NotAvailable as reason:
            rows += [
                {"target": "mlserver-grpc", "model": m, "concurrency": c, "unavailable": str(reason)}
                for m in args.models
                for c in args.concurrency
            ]
    echo_port = free_port()
    echo = subprocess.Popen(
        [sys.executable, "-m", "bench.grpc_echo", str(echo_port), args.models[0]], cwd=ROOT, start_new_session=True
    )
    try:
        print("\necho-grpc (a bare grpc.aio server, the ceiling)", flush=True)
        if wait_for_grpc(f"127.0.0.1:{echo_port}"):
            target = GrpcTarget("echo-grpc", f"127.0.0.1:{echo_port}", False)
            rows += measure_grpc_target(target, args.models[:1], args.concurrency, args.seconds, args.runs, folder)
    finally:
        os.killpg(echo.pid, signal.SIGTERM)
        echo.wait(timeout=30)
    for label, peer_spec, counts in peers:
        print(f"\n{label}", flush=True)
        address = f"127.0.0.1:{ports[label]}"
        with ServerProcess(peer_spec, RESULTS / "logs"):
            target = GrpcTarget(label, address, counts)
            rows += measure_grpc_target(target, args.models, args.concurrency, args.seconds, args.runs, folder)
    return rows


def guarded(section: str, run) -> dict:
    """Run one optional section; a NotAvailable (or a crash) becomes the reason the report shows."""
    print(f"\n{section}", flush=True)
    try:
        result = run()
    except NotAvailable as reason:
        result = {"unavailable": str(reason)}
    except Exception as error:  # one broken section must not lose the others' figures
        result = {"unavailable": f"{type(error).__name__}: {error}"}
    if "unavailable" in result:
        print(f"  not available: {result['unavailable'][:300]}", flush=True)
    return result


def render_only(out: Path) -> int:
    """Re-render the markdown from the last run (after adding GPU results or editing the closing note)."""
    published = RESULTS / "published.json"
    if not published.exists():
        print(f"no {published}: run the bench without --no-write first", file=sys.stderr)
        return 2
    results = json.loads(published.read_text()) | published_gpu()
    write_outputs(results, out, RESULTS)
    print(f"wrote {out}")
    return 0


def published_gpu() -> dict:
    """{"gpu": the last GPU run} when one was published, else {}."""
    return {"gpu": json.loads(GPU_RESULTS.read_text())} if GPU_RESULTS.exists() else {}


def publish_gpu(source: Path, out: Path) -> int:
    """Keep a GPU run's results (bench/gpu.sh's gpu_results.json) and rewrite only its section and target rows."""
    try:
        gpu = json.loads(source.read_text())
    except (OSError, ValueError) as error:
        print(f"cannot read {source}: {error}", file=sys.stderr)
        return 2
    if not isinstance(gpu, dict) or "markdown" not in gpu or "system" not in gpu:
        print(f"{source} is not bench/gpu_bench.py's gpu_results.json", file=sys.stderr)
        return 2
    GPU_RESULTS.write_text(json.dumps(gpu, indent=1) + "\n")
    write_outputs({"gpu": gpu}, out, RESULTS, ["gpu"])
    print(f"kept {GPU_RESULTS}; wrote its section and targets into {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.render_only:
        return render_only(args.out)
    if args.gpu_results:
        return publish_gpu(args.gpu_results, args.out)
    if not shutil.which(WRK):
        print("wrk is not installed: apt-get install wrk", file=sys.stderr)
        return 2
    needs_mlserver = "mlserver" in args.targets and bool({"http", "grpc"} & set(args.sections))
    if args.setup_peers or (needs_mlserver and mlserver_peer.venv_missing()):
        print("setting up MLServer's virtualenv under bench/.peers/ ...", flush=True)
        try:
            mlserver_peer.setup_venv()
        except Exception as error:  # reported as not available in the MLServer rows
            print(f"  MLServer setup failed: {error}", flush=True)
    started = time.monotonic()
    repository = write_repository(RESULTS / "repository", queue_delay_us=args.queue_delay_us).resolve()
    workdir = Path(tempfile.mkdtemp(prefix="infera-bench-"))
    scripts = WrkScripts()
    results: dict = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python -m bench " + shlex.join(sys.argv[1:] if argv is None else argv),
        "system": system_info(),
        "settings": {
            "seconds": args.seconds,
            "runs": args.runs,
            "models": args.models,
            "concurrencies": args.concurrency,
            "encodings": args.encodings,
            "cores": usable_cores(),
            "infera_launch": resolve_mode(args.infera_launch),
            "mlserver_workers": args.mlserver_workers,
            "queue_delay_us": {name: m.queue_delay_us for name, m in MODELS.items()}
            if args.queue_delay_us is None
            else {name: (args.queue_delay_us if m.queue_delay_us else 0) for name, m in MODELS.items()},
        },
    }
    try:
        if "direct" in args.sections:
            print("\ndirect ceiling (session.run)", flush=True)
            results["direct"] = []
            for model in dict.fromkeys(args.models + ["mlp_large"]):
                rows = measure_direct(repository, model, [1, 8, 16, 64], args.seconds)
                for row in rows:
                    rate, call = row["infer_per_s"], row["call_us"]
                    print(f"  {model:10} batch {row['batch']:3} {rate:10.0f} inf/s {call:9.1f} µs/call")
                results["direct"] += rows
        if "http" in args.sections:
            plan = HttpPlan(args.models, args.encodings, args.concurrency, args.seconds, args.runs)
            echo_dir = write_echo_responses(workdir / "echo", repository, args.models)
            results["http"] = []
            for target in http_targets(args, repository, workdir, echo_dir):
                print(f"\n{target.label}", flush=True)
                results["http"] += measure_target(target, repository, plan, scripts, RESULTS / "logs")
        if "grpc" in args.sections:
            print("\ngRPC ModelInfer (h2load)", flush=True)
            try:
                results["grpc"] = grpc_section(args, repository, workdir)
            except NotAvailable as reason:
                results["grpc"] = [{"unavailable": str(reason)}]
                print(f"  not available: {reason}", flush=True)
        if "engine" in args.sections:
            results["engine"] = guarded(
                f"engine in process ({args.engine_model}, 64 callers)",
                lambda: measure_engine(repository, args.engine_model, max(args.seconds, 2.0)),
            )
        if "hotswap" in args.sections:
            results["hotswap"] = guarded("hot swap", lambda: hotswap_section(args, repository, workdir, scripts))
        if "dashboards" in args.sections:
            results["dashboards"] = guarded(
                "dashboards", lambda: dashboards_section(args, repository, workdir, scripts)
            )
        if "python" in args.sections:
            results["python"] = guarded(
                "python models: isolated vs in-process (add_sub over HTTP)",
                lambda: python_section(args, repository, workdir, scripts),
            )
            results["python"].update(date=results["date"], command=results["command"])
        if "sequences" in args.sections:
            results["sequences"] = guarded(
                f"sequences: {CONCURRENCY} sequences of {STEPS} steps, direct / oldest / none (ONNX accumulator)",
                lambda: sequences_section(args, workdir),
            )
            results["sequences"].update(date=results["date"], command=results["command"])
        if "ensemble" in args.sections:
            results["ensemble"] = guarded(
                "ensemble: digits_pipeline vs the client chaining its 3 steps (PNG digits, c=1 and 64)",
                lambda: ensemble_section(args, workdir),
            )
            results["ensemble"].update(date=results["date"], command=results["command"])
        if "traffic" in args.sections:
            results["traffic"] = guarded(
                "traffic: mlp_small c=64 with no policy, a 90/10 canary and a 100% shadow (set through the console)",
                lambda: traffic_runs.traffic_section(
                    repository,
                    workdir,
                    RESULTS / "logs",
                    scripts,
                    resolve_mode(args.infera_launch),
                    results["settings"]["queue_delay_us"][MLP_SMALL.name],
                    args.seconds,
                    args.runs,
                ),
            )
            results["traffic"].update(date=results["date"], command=results["command"])
        if "profiles" in args.sections:
            results["profiles"] = guarded(
                "profiles: tuned and default settings interleaved, mlp_small c=64, HTTP binary and gRPC",
                lambda: profiles_section(args, repository, workdir),
            )
            results["profiles"].update(date=results["date"], command=results["command"])
        if "cluster" in args.sections:
            results["cluster"] = guarded(
                "cluster: mlp_small c=64 through HAProxy with 1, 2 and 3 replicas; 20 switches reaching all three",
                lambda: cluster_runs.cluster_section(repository, workdir, scripts, args.seconds, args.runs),
            )
            results["cluster"].update(date=results["date"], command=results["command"])
        if "llm" in args.sections:
            results["llm"] = guarded(
                "llm: smollm2 over /v1 at 1, 8, 32 streams beside transformers serve, generate and llama.cpp",
                lambda: llm.llm_section(workdir, max(args.seconds, 20.0), args.infera_launch),
            )
            results["llm"].update(date=results["date"], command=results["command"])
        for name, (title, run) in memory_sections(workdir).items():
            if name in args.sections:
                results[name] = guarded(title, run)
                results[name].update(date=results["date"], command=results["command"])
    finally:
        scripts.close()
        shutil.rmtree(workdir, ignore_errors=True)
    results |= published_gpu()
    results["elapsed_s"] = time.monotonic() - started
    results["system"]["load average at end"] = load_average()
    print_summary(results)
    only = None if set(args.sections) == set(SECTIONS) else args.sections
    write_outputs(results, None if args.no_write else args.out, RESULTS, only)
    where = (
        "" if args.no_write else f"; wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}"
    )
    print(f"\ndone in {results['elapsed_s']:.0f} s{where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
