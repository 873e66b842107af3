"""The multiplex section: many on-demand models under one memory budget, Zipf traffic from concurrent callers.

50 ONNX models of about 40 MB each (one MatMul over a 2500 x 4000 float32 weight, summed to one number a row) are
registered `on_demand` under a 500 MB host budget, so about a quarter fit at once. 32 callers in the engine's
process each send one request after another for 60 s, the model drawn from a Zipf law (s = 1.1) over the 50; a
sampler reads the budget's use (what the governor charges) and the process's RSS every 100 ms. Reported: requests
and failures, the hit rate (requests that found their model resident), cold starts and their p50/p99, request
latency, evictions, and the highest use and RSS against the budget.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path

import numpy as np

MODELS = 50
ROWS, COLUMNS = 2500, 4000  # 10 M float32 weights: 40 MB a model
BUDGET_MB = 500
CONNECTIONS = 32
SECONDS = 60.0
ZIPF_S = 1.1
SAMPLE_EVERY = 0.1

CONFIG = """name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ {rows} ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }} ]
dynamic_batching {{ }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
parameters {{ key: "on_demand" value {{ string_value: "true" }} }}
parameters {{ key: "intra_op_thread_count" value {{ string_value: "1" }} }}
"""


def write_models(root: Path, count: int = MODELS) -> Path:
    """`count` model folders sharing one ONNX file by hard links (the engine loads each on its own)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    root.mkdir(parents=True, exist_ok=True)
    source = root / "weights.onnx"
    if not source.exists():
        weights = np.random.default_rng(0).standard_normal((ROWS, COLUMNS), dtype=np.float32) / ROWS
        graph = helper.make_graph(
            [
                helper.make_node("MatMul", ["X", "W"], ["P"]),
                helper.make_node("ReduceSum", ["P", "axes"], ["Y"], keepdims=1),
            ],
            "wide",
            [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", ROWS])],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 1])],
            [numpy_helper.from_array(weights, "W"), numpy_helper.from_array(np.array([1], np.int64), "axes")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.save(model, source)
    for i in range(count):
        name = f"wide_{i:02d}"
        (root / name / "1").mkdir(parents=True, exist_ok=True)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name, rows=ROWS))
        target = root / name / "1" / "model.onnx"
        if not target.exists():
            os.link(source, target)
    return root


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)]


async def run(root: Path, seconds: float = SECONDS, connections: int = CONNECTIONS, budget_mb: int = BUDGET_MB) -> dict:
    from engine.serving.memory_budget import process_rss
    from engine.serving.server import InferenceServer
    from engine.settings import EngineSettings, MemoryBudgetSettings
    from engine.types import InferenceRequest

    budget = budget_mb << 20
    settings = EngineSettings(memory=MemoryBudgetSettings(host_bytes=budget, cold_start_timeout_seconds=120.0))
    baseline = process_rss()
    server = InferenceServer(root, gpu_count=0, settings=settings)
    began = time.monotonic()
    await server.start()
    registered = time.monotonic() - began
    names = sorted(n for n in server.repository.model_names() if server.model_ready(n))
    weights = 1.0 / np.arange(1, len(names) + 1) ** ZIPF_S
    rng = np.random.default_rng(1)
    draws = iter(rng.choice(len(names), size=10_000_000, p=weights / weights.sum()))
    cold_starts: list[float] = []
    server.memory.on_event = lambda e: cold_starts.append(e.cold_start_seconds) if e.cold_start_seconds else None
    counts = {"ok": 0, "failed": 0, "hits": 0}
    errors: dict[str, int] = {}
    latencies: list[float] = []
    highest = {"used": 0, "rss": 0}
    x = np.ones((1, ROWS), np.float32)
    deadline = time.monotonic() + seconds

    async def caller() -> None:
        while time.monotonic() < deadline:
            name = names[next(draws)]
            if server.get_model(name).residency.resident:
                counts["hits"] += 1
            started = time.perf_counter()
            try:
                await server.infer(InferenceRequest(model_name=name, inputs={"X": x}, batch_size=1))
                counts["ok"] += 1
                latencies.append(time.perf_counter() - started)
            except Exception as exc:  # noqa: BLE001 - counted and named in the report
                counts["failed"] += 1
                key = f"{type(exc).__name__}: {str(exc)[:160]}"
                errors[key] = errors.get(key, 0) + 1

    async def sampler() -> None:
        while time.monotonic() < deadline:
            highest["used"] = max(highest["used"], server.memory.used())
            highest["rss"] = max(highest["rss"], await asyncio.to_thread(process_rss))
            await asyncio.sleep(SAMPLE_EVERY)

    await asyncio.gather(sampler(), *(caller() for _ in range(connections)))
    requests = counts["ok"] + counts["failed"]
    footprints = [s.residency.footprint.get("host", 0) for s in server.served_versions()]
    result = {
        "models": len(names),
        "budget_mib": budget_mb,
        "connections": connections,
        "seconds": seconds,
        "zipf_s": ZIPF_S,
        "registered_s": round(registered, 1),
        "requests": requests,
        "failed": counts["failed"],
        "errors": dict(list(errors.items())[:5]),
        "hit_rate": round(counts["hits"] / requests, 4) if requests else None,
        "cold_starts": len(cold_starts),
        "cold_start_p50_ms": _ms(percentile(cold_starts, 0.5)),
        "cold_start_p99_ms": _ms(percentile(cold_starts, 0.99)),
        "latency_p50_ms": _ms(percentile(latencies, 0.5)),
        "latency_p99_ms": _ms(percentile(latencies, 0.99)),
        "evictions": server.memory.evictions,
        "footprint_median_mib": round(statistics.median(footprints) / (1 << 20), 1) if footprints else None,
        "max_charged_mib": round(highest["used"] / (1 << 20), 1),
        "max_rss_over_baseline_mib": round((highest["rss"] - baseline) / (1 << 20), 1),
        "requests_per_s": round(requests / seconds, 1),
    }
    await server.stop()
    return result


def _ms(seconds: float | None) -> float | None:
    return round(seconds * 1000, 1) if seconds is not None else None


def multiplex_section(workdir: Path, seconds: float = SECONDS) -> dict:
    root = write_models(workdir / "multiplex")
    result = asyncio.run(run(root, seconds))
    print(
        f"  {result['requests']} requests, {result['failed']} failed, hit rate {result['hit_rate']}, cold start "
        f"p50 {result['cold_start_p50_ms']} ms p99 {result['cold_start_p99_ms']} ms, max charged "
        f"{result['max_charged_mib']} MiB of {result['budget_mib']}",
        flush=True,
    )
    return result


def memory_sections(workdir: Path) -> dict:
    """bench/__main__.py's memory sections: name -> (title, run). INFERA_BENCH_FOOTPRINT_CYCLES (default 1000)
    sets the cycles of each backend."""
    from bench.footprint import footprint_section

    cycles = int(os.environ.get("INFERA_BENCH_FOOTPRINT_CYCLES", "1000"))
    counts = {"onnx": cycles, "torchscript": cycles, "python": cycles}
    return {
        "footprint": (f"footprint: {cycles} load/unload cycles each", lambda: footprint_section(workdir, counts)),
        "multiplex": (
            f"multiplex: {MODELS} models of ~40 MB under {BUDGET_MB} MB, Zipf, {CONNECTIONS} callers",
            lambda: multiplex_section(workdir),
        ),
    }


if __name__ == "__main__":
    import json
    import sys
    import tempfile

    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="infera-multiplex-"))
    print(json.dumps(multiplex_section(folder, float(sys.argv[2]) if len(sys.argv) > 2 else SECONDS), indent=1))
