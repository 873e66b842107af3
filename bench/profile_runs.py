"""The two profiles side by side (issue 38): Infera tuned and Infera as a user runs it, interleaved on one machine.

`tuned`: the bench's configs (two instances of one intra-op thread, a 100 µs window) without the access log;
`default`: `make serve`'s settings (access log on) over the configs a user uploads untuned (tensors and
`dynamic_batching { }`); `uploaded, no access log`: those configs without the log, to tell the two changes apart.
All three servers run at once, idle but for their turn; each round loads each in turn (the order reversed every
other round), mlp_small at 64 connections over HTTP with binary tensors (wrk) and then over gRPC (h2load), so
whatever else the shared machine runs weighs on every profile alike. Figures are the medians over the rounds.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from bench.grpc_runs import request_frame, run_h2load
from bench.http_runs import infer_url
from bench.models import MLP_SMALL
from bench.payloads import make_payload
from bench.servers import ServerProcess, ServerSpec, free_port
from bench.wrk import WrkScripts, run_wrk

MODEL = MLP_SMALL
CONNECTIONS = 64
PROFILES = ("tuned", "default", "uploaded, no access log")

# a profile's server: (HTTP port, gRPC port) -> its ServerSpec
SpecOf = Callable[[int, int], ServerSpec]


def measure_profiles(
    specs: dict[str, SpecOf], repository: Path, workdir: Path, log_folder: Path, seconds: float, rounds: int
) -> dict:
    """Each profile's HTTP (binary) and gRPC requests a second per round, and their medians."""
    grpc_ports = {name: free_port() for name in specs}
    built = {name: spec_of(free_port(), grpc_ports[name]) for name, spec_of in specs.items()}
    for name, spec in built.items():
        spec.ready_models, spec.name = [MODEL.name], f"profile-{name}"
    scripts = WrkScripts()
    payload = make_payload(MODEL, repository, "binary")
    script = scripts.script(f"{MODEL.name}-binary", payload.body, payload.headers)
    frame = workdir / f"{MODEL.name}.grpc"
    frame.write_bytes(request_frame(MODEL))
    servers: list[ServerProcess] = []
    runs: dict[str, dict[str, list[float]]] = {name: {"http": [], "grpc": []} for name in built}
    try:
        for spec in built.values():
            servers.append(ServerProcess(spec, log_folder).__enter__())
        for name, spec in built.items():  # warm each: pools, sessions, the batcher
            run_wrk(infer_url(spec.base_url, MODEL.name), script, CONNECTIONS, 1)
            run_h2load(f"127.0.0.1:{grpc_ports[name]}", frame, CONNECTIONS, 1)
        for turn in range(rounds):
            order = list(built) if turn % 2 == 0 else list(reversed(built))
            for name in order:
                http = run_wrk(infer_url(built[name].base_url, MODEL.name), script, CONNECTIONS, seconds).rps
                grpc = run_h2load(f"127.0.0.1:{grpc_ports[name]}", frame, CONNECTIONS, seconds)["rps"]
                runs[name]["http"].append(http)
                runs[name]["grpc"].append(grpc)
                print(f"  round {turn} {name:24} HTTP binary {http:8.0f} req/s  gRPC {grpc:8.0f} req/s", flush=True)
    finally:
        for server in servers:
            server.stop()
        scripts.close()
    return {
        "model": MODEL.name,
        "connections": CONNECTIONS,
        "seconds": seconds,
        "rounds": rounds,
        "profiles": {
            name: {
                "http_rps": statistics.median(figures["http"]),
                "grpc_rps": statistics.median(figures["grpc"]),
                "http_runs": figures["http"],
                "grpc_runs": figures["grpc"],
            }
            for name, figures in runs.items()
        },
    }
