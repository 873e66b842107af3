"""The GPU bench's served figures: the engine in process (one caller's batches, concurrent callers on one and two
instances) and the standalone v2 app under uvicorn, its /metrics scraped under load."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

from bench.gpu_direct import percentiles_ms, print_rate
from bench.gpu_models import MODEL, TARGET_BATCH, VARIANTS
from bench.loadgen import run_load
from bench.servers import ServerProcess, ServerSpec, free_port, uvicorn_command

CALL_TIMEOUT_S = 60.0  # one call slower than this is a hang: reported, so the device minutes are not spent waiting
WARM_CONCURRENT_S = 1.0  # concurrent callers run this long untimed first


def _counts(server, name: str) -> tuple[int, int]:
    stats = server.statistics(name)["model_stats"][0]
    return stats["inference_count"], stats["execution_count"]


async def measure_engine(
    repo: Path, models: list[str], batches: list[int], image: int, seconds: float, callers: int
) -> dict:
    """The engine in process on the repository: one caller's batches in a closed loop, then concurrent callers."""
    from engine.serving.server import InferenceServer
    from engine.types import InferenceRequest

    server = InferenceServer(repo)
    await server.start()
    missing = [m for m in models if not server.model_ready(m)]
    if missing:
        await server.stop()
        raise RuntimeError(f"models not ready: {', '.join(missing)} (the log above says why)")
    rng = np.random.default_rng(0)
    result: dict = {"sequential": {}, "concurrent": []}

    async def call(model: str, array: np.ndarray) -> None:
        request = InferenceRequest(model_name=model, inputs={"INPUT__0": array}, batch_size=len(array))
        await asyncio.wait_for(server.infer(request), CALL_TIMEOUT_S)

    async def closed_loop(model: str, batch: int) -> dict:
        array = rng.standard_normal((batch, 3, image, image), dtype=np.float32)
        for _ in range(3):
            await call(model, array)
        times, deadline = [], time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            await call(model, array)
            times.append(time.perf_counter() - start)
        p50, p99 = percentiles_ms(times)
        return {"batch": batch, "images_per_s": batch * len(times) / sum(times), "p50_ms": p50, "p99_ms": p99}

    async def concurrent(model: str, callers: int, batch: int) -> dict:
        array = rng.standard_normal((batch, 3, image, image), dtype=np.float32)
        done, deadline = 0, 0.0

        async def caller() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await call(model, array)
                done += batch

        # warm for a second untimed: the batch sizes these callers form get their graphs captured first
        deadline = time.perf_counter() + WARM_CONCURRENT_S
        await asyncio.gather(*(caller() for _ in range(callers)))
        done, deadline = 0, time.perf_counter() + seconds
        inferences, executions = _counts(server, model)
        start = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(callers)))
        elapsed = time.perf_counter() - start
        after_inferences, after_executions = _counts(server, model)
        row = {
            "model": model,
            "instances": VARIANTS[model][1],
            "callers": callers,
            "batch": batch,
            "images_per_s": done / elapsed,
            "mean_batch": (after_inferences - inferences) / max(1, after_executions - executions),
        }
        print(
            f"  engine {model} {callers} callers of batch {batch}: {row['images_per_s']:.0f} img/s, "
            f"mean batch {row['mean_batch']:.1f}",
            flush=True,
        )
        return row

    try:
        for model in models:
            if model in ("resnet50", "resnet50_onnx"):
                sizes = batches
            elif model == "resnet50_eager":
                sizes = [b for b in batches if b in (1, TARGET_BATCH)] or batches[:1]
            else:
                continue
            result["sequential"][model] = []
            for batch in sizes:
                result["sequential"][model].append(await closed_loop(model, batch))
                print_rate(f"engine {model}", result["sequential"][model][-1])
        for model in ("resnet50_b64", "resnet50_b64_x2"):
            if model in models:
                result["concurrent"].append(await concurrent(model, callers, 1))
                result["concurrent"].append(await concurrent(model, 4, min(TARGET_BATCH, max(batches))))
        result["statistics"] = {m: server.statistics(m)["model_stats"][0] for m in models}
    finally:
        await server.stop()
    return result


GPU_METRICS = ("nv_gpu_utilization", "nv_gpu_memory_used_bytes", "nv_gpu_memory_total_bytes", "nv_gpu_power_usage")


def scrape_gpu_metrics(base_url: str) -> dict[str, float]:
    """The NVML gauges of one /metrics scrape (what the console's /monitoring/ charts and Prometheus read)."""
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as response:  # noqa: S310 - loopback
        text = response.read().decode()
    found = {}
    for name in GPU_METRICS:
        match = re.search(rf"^{name}\{{[^}}]*\}} ([0-9.e+-]+)$", text, re.MULTILINE)
        if match:
            found[name] = float(match.group(1))
    return found


def measure_http(
    repo: Path, image: int, concurrencies: list[int], seconds: float, log_folder: Path, delay_us: int
) -> dict:
    """The standalone v2 app under uvicorn serving `resnet50` alone; binary bodies of one image each."""
    only = Path(tempfile.mkdtemp(prefix="infera-gpu-http-"))
    shutil.copytree(repo / MODEL, only / MODEL)
    config = only / MODEL / "config.pbtxt"  # many connections: the batcher's window, as the concurrent callers'
    config.write_text(
        config.read_text().replace("max_queue_delay_microseconds: 0", f"max_queue_delay_microseconds: {delay_us}")
    )
    port = free_port()
    spec = ServerSpec(
        "infera-gpu",
        uvicorn_command("engine.frontend.standalone:app", port),
        port,
        env={"INFERA_MODEL_REPOSITORY": str(only), "INFERA_GRPC_PORT": "0"},  # HTTP only: no port 8001 to collide on
        ready_models=[MODEL],
    )
    array = np.random.default_rng(0).standard_normal((1, 3, image, image), dtype=np.float32)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT__0",
                    "shape": [1, 3, image, image],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": array.nbytes},
                }
            ],
            "outputs": [{"name": "OUTPUT__0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    body = header + array.tobytes()
    headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))}
    rows, scraped = [], {}
    try:
        with ServerProcess(spec, log_folder):
            path = f"/v2/models/{MODEL}/infer"
            run_load("127.0.0.1", port, path, body, headers, 8, 2.0)  # warm-up
            for connections in concurrencies:
                processes = max(1, min(8, connections // 8))
                scrape = threading.Timer(seconds / 2, lambda: scraped.update(scrape_gpu_metrics(spec.base_url)))
                heaviest = connections == max(concurrencies)
                if heaviest:
                    scrape.start()  # mid-run, under the heaviest load
                result = run_load("127.0.0.1", port, path, body, headers, connections, seconds, processes)
                if heaviest:
                    scrape.join()
                rows.append(
                    {
                        "connections": connections,
                        "rps": result.rps,
                        "p50_ms": result.p50_ms,
                        "p99_ms": result.p99_ms,
                        "errors": result.errors,
                    }
                )
                print(
                    f"  http c={connections:3}: {result.rps:8.0f} req/s p50 {result.p50_ms:.2f} ms "
                    f"errors {result.errors}",
                    flush=True,
                )
    finally:
        shutil.rmtree(only, ignore_errors=True)
    print(f"  /metrics under load: {scraped}", flush=True)
    return {"rows": rows, "metrics_under_load": scraped}
