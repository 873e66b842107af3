"""The gRPC matrix: ModelInfer on Infera and MLServer, loaded by h2load (C, not Python-bound) with one prepared frame.

h2load sends the same length-prefixed ModelInferRequest on every stream (`-d`), one stream per connection at a time
(`-m 1`, closed loop, as wrk's connections); its per-request log gives the latency percentiles. h2load only sees
HTTP statuses, and gRPC answers errors with status 200 and a `grpc-status` trailer, so every case is probed with
tritonclient.grpc first, and Infera's success counter is read around each run to count failed requests exactly.
"""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.models import MODELS, BenchModel, sample_inputs

H2LOAD = shutil.which("h2load") or "/usr/bin/h2load"
METHOD_PATH = "/inference.GRPCInferenceService/ModelInfer"
_REQUESTS = re.compile(
    r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored"
)


@dataclass(frozen=True)
class GrpcTarget:
    """A gRPC endpoint under test: its label and `host:port`; `stats` reads a model's success count, or None."""

    label: str
    address: str
    counts_successes: bool


def request_frame(model: BenchModel, batch: int = 1) -> bytes:
    """A ModelInferRequest of `batch` rows with raw input contents, framed as gRPC sends it (no compression)."""
    from engine.proto.grpc_messages import ModelInferRequest

    request = ModelInferRequest(model_name=model.name)
    for name, array in sample_inputs(model, batch).items():
        request.inputs.add(name=name, datatype=model.datatype, shape=list(array.shape))
        request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
    for name in model.outputs:
        request.outputs.add(name=name)
    data = request.SerializeToString()
    return b"\x00" + len(data).to_bytes(4, "big") + data


def wait_for_grpc(address: str, seconds: float = 60.0) -> bool:
    """Until a ServerLive call answers (a process that has just started), at most `seconds`."""
    import time

    import tritonclient.grpc as grpcclient

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        client = grpcclient.InferenceServerClient(address)
        try:
            if client.is_server_live():
                return True
        except Exception:  # noqa: BLE001 - not listening yet
            time.sleep(0.2)
        finally:
            client.close()
    return False


def probe(target: GrpcTarget, model: BenchModel) -> str | None:
    """One request through tritonclient.grpc; None when it answered with every output."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(target.address)
    try:
        inputs = []
        for name, array in sample_inputs(model, 1).items():
            infer_input = grpcclient.InferInput(name, list(array.shape), model.datatype)
            infer_input.set_data_from_numpy(array)
            inputs.append(infer_input)
        result = client.infer(model.name, inputs)
        missing = [name for name in model.outputs if result.as_numpy(name) is None]
        return f"outputs missing: {missing}" if missing else None
    except Exception as error:  # noqa: BLE001 - reported as the reason the case is not measured
        return f"{type(error).__name__}: {error}"
    finally:
        client.close()


def success_count(target: GrpcTarget, model: str) -> int | None:
    """The model's success count from the target's statistics (Infera), None where the target has none."""
    if not target.counts_successes:
        return None
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(target.address)
    try:
        return sum(s.inference_stats.success.count for s in client.get_inference_statistics(model).model_stats)
    finally:
        client.close()


def run_h2load(address: str, frame_path: Path, connections: int, seconds: float) -> dict:
    """One h2load run: succeeded and failed requests, requests per second, latency percentiles in ms."""
    with tempfile.TemporaryDirectory() as folder:
        log_path = Path(folder) / "requests.tsv"
        command = [
            H2LOAD,
            "-D",
            str(max(1, round(seconds))),  # h2load takes whole seconds
            "-c",
            str(connections),
            "-m",
            "1",
            "-d",
            str(frame_path),
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            "--log-file",
            str(log_path),
            f"http://{address}{METHOD_PATH}",
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120)
        latencies = [int(line.split("\t")[2]) for line in log_path.read_text().splitlines() if line.count("\t") >= 2]
    counts = _REQUESTS.search(done.stdout)
    if counts is None:
        raise RuntimeError(f"h2load printed no request counts: {done.stdout[-500:]} {done.stderr[-500:]}")
    succeeded, failed, errored = int(counts.group(4)), int(counts.group(5)), int(counts.group(6))
    latencies.sort()
    return {
        "requests": succeeded,
        "http_errors": failed + errored,
        "rps": succeeded / seconds,
        "p50_ms": _percentile(latencies, 50) / 1000,
        "p99_ms": _percentile(latencies, 99) / 1000,
    }


def _percentile(ordered: list[int], percentile: int) -> float:
    if not ordered:
        return 0.0
    return float(ordered[max(0, min(len(ordered) - 1, round(percentile / 100 * len(ordered)) - 1))])


def measure_grpc_target(
    target: GrpcTarget, models: list[str], concurrencies: list[int], seconds: float, runs: int, folder: Path
) -> list[dict]:
    """Every (model, concurrency) of one target, median of `runs` runs; rows say why when a case cannot run."""
    rows = []
    for name in models:
        model = MODELS[name]
        problem = None if target.label.startswith("echo") else probe(target, model)
        if problem:
            print(f"  {target.label:16} {name:10} not available: {problem[:300]}", flush=True)
            rows += [_row(target, name, c, unavailable=f"probe failed: {problem}") for c in concurrencies]
            continue
        frame_path = folder / f"{name}.grpc"
        frame_path.write_bytes(request_frame(model))
        run_h2load(target.address, frame_path, 64, max(1.0, seconds))  # warm-up
        for connections in concurrencies:
            measured = []
            for _ in range(runs):
                before = success_count(target, name)
                run = run_h2load(target.address, frame_path, connections, seconds)
                after = success_count(target, name)
                # gRPC failures travel in trailers with HTTP 200: the server's own success counter tells them apart
                run["grpc_errors"] = max(0, run["requests"] - (after - before)) if before is not None else None
                measured.append(run)
            row = _median(measured)
            rows.append(_row(target, name, connections, **row))
            print(
                f"  {target.label:16} {name:10} c={connections:<3} {row['rps']:9.0f} req/s  p50 {row['p50_ms']:7.3f} ms"
                f"  p99 {row['p99_ms']:7.3f} ms  errors {row['errors']}",
                flush=True,
            )
    return rows


def _median(runs: list[dict]) -> dict:
    middle = sorted(runs, key=lambda r: r["rps"])[len(runs) // 2]
    errors = sum(r["http_errors"] for r in runs)
    grpc_errors = [r["grpc_errors"] for r in runs if r["grpc_errors"] is not None]
    return {
        "rps": middle["rps"],
        "p50_ms": statistics.median(r["p50_ms"] for r in runs),
        "p99_ms": statistics.median(r["p99_ms"] for r in runs),
        "errors": errors + sum(grpc_errors),
        "errors_counted": "HTTP and gRPC" if grpc_errors else "HTTP only",
    }


def _row(target: GrpcTarget, model: str, concurrency: int, **values) -> dict:
    return {"target": target.label, "model": model, "concurrency": concurrency, **values}
