"""The GPU path (run by bench/gpu.sh): a ResNet-50-sized CNN on the pytorch backend, direct, in the engine, over HTTP.

Writes gpu_results.json and gpu_results.md under --out, with NVML readings per phase. `--device cpu --quick`
runs the same code small on a machine without a GPU, to check it before a GPU session spends its minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench.loadgen import run_load
from bench.servers import ServerProcess, ServerSpec, free_port, uvicorn_command

MODEL = "resnet50"
MAX_BATCH = 256
QUEUE_DELAY_US = 500
CALL_TIMEOUT_S = 60.0  # one call slower than this is a hang: reported, so the device minutes are not spent waiting


def build_resnet(torch, classes: int = 1000):
    """A ResNet-50 (bottleneck blocks 3-4-6-3, 25.6 M parameters) in plain torch, weights from a fixed seed."""
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.Conv2d(width, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            )
            self.skip = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout
                else nn.Identity()
            )
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.relu(self.body(x) + self.skip(x))

    torch.manual_seed(0)
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers).eval()


def write_model(torch, root: Path, image: int, kind: str, delay_us: int = QUEUE_DELAY_US) -> Path:
    """Export the CNN as TorchScript into a Triton repository with the dynamic batcher on."""
    folder = root / MODEL
    (folder / "1").mkdir(parents=True, exist_ok=True)
    with torch.inference_mode():
        traced = torch.jit.trace(build_resnet(torch), torch.zeros(1, 3, image, image))
    traced.save(str(folder / "1" / "model.pt"))
    gpus = " gpus: [ 0 ]" if kind == "KIND_GPU" else ""
    (folder / "config.pbtxt").write_text(
        f'name: "{MODEL}"\nplatform: "pytorch_libtorch"\nmax_batch_size: {MAX_BATCH}\n'
        f'input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, {image}, {image} ] }} ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1000 ] } ]\n'
        f"instance_group [ {{ count: 1 kind: {kind}{gpus} }} ]\n"
        f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}\n"
    )
    return root


class NvmlSampler:
    """GPU utilization, memory, power and temperature every 100 ms, summarized per named phase."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float, float, float]] = []
        self.phases: list[tuple[str, float, float]] = []
        self._stop = threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self.device = pynvml.nvmlDeviceGetName(self.handle)
            self.device = self.device.decode() if isinstance(self.device, bytes) else self.device
        except Exception as error:  # no GPU or no NVML: the run goes on and says so
            self.nvml, self.device = None, f"no NVML: {error}"
        self._thread = threading.Thread(target=self._loop, daemon=True)
        if self.nvml:
            self._thread.start()

    def _loop(self) -> None:
        nvml = self.nvml
        while not self._stop.wait(0.1):
            util = nvml.nvmlDeviceGetUtilizationRates(self.handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(self.handle)
            power = nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000
            temperature = nvml.nvmlDeviceGetTemperature(self.handle, nvml.NVML_TEMPERATURE_GPU)
            self.samples.append((time.monotonic(), util.gpu, memory.used / 2**30, power, temperature))

    def phase(self, name: str):
        sampler = self

        class Phase:
            def __enter__(self):
                self.start = time.monotonic()

            def __exit__(self, *exc):
                sampler.phases.append((name, self.start, time.monotonic()))

        return Phase()

    def summary(self) -> dict[str, dict]:
        self._stop.set()
        result = {}
        for name, start, end in self.phases:
            rows = np.array([s[1:] for s in self.samples if start <= s[0] <= end])
            if rows.size:
                result[name] = {
                    "util_mean_pct": float(rows[:, 0].mean()),
                    "mem_max_gib": float(rows[:, 1].max()),
                    "power_mean_w": float(rows[:, 2].mean()),
                    "temp_max_c": float(rows[:, 3].max()),
                }
        return result


def percentiles_ms(seconds: list[float]) -> tuple[float, float]:
    p50, p99 = np.percentile(np.asarray(seconds) * 1000, [50, 99])
    return float(p50), float(p99)


def measure_direct(torch, repo: Path, device: str, batches: list[int], image: int, seconds: float) -> list[dict]:
    """torch alone: the TorchScript model on the device, host arrays in and out, as the engine must do."""
    model = torch.jit.load(str(repo / MODEL / "1" / "model.pt"), map_location=device).eval()
    rows = []
    with torch.inference_mode():
        for batch in batches:
            array = np.random.default_rng(0).standard_normal((batch, 3, image, image), dtype=np.float32)
            for _ in range(3):
                model(torch.from_numpy(array).to(device)).cpu().numpy()
            times, deadline = [], time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                model(torch.from_numpy(array).to(device)).cpu().numpy()
                times.append(time.perf_counter() - start)
            p50, p99 = percentiles_ms(times)
            rows.append({"batch": batch, "images_per_s": batch * len(times) / sum(times), "p50_ms": p50, "p99_ms": p99})
            print(f"  direct batch {batch:3}: {rows[-1]['images_per_s']:8.0f} img/s p50 {p50:.2f} ms", flush=True)
    del model
    return rows


async def _engine_runs(repo: Path, batches: list[int], image: int, seconds: float, callers: int) -> dict:
    from engine.server import InferenceServer
    from engine.types import InferenceRequest

    server = InferenceServer(repo)
    await server.start()
    rng = np.random.default_rng(0)
    rows = []
    try:
        for batch in batches:
            array = rng.standard_normal((batch, 3, image, image), dtype=np.float32)

            def request(array=array, batch=batch) -> InferenceRequest:
                return InferenceRequest(model_name=MODEL, inputs={"INPUT__0": array}, batch_size=batch)

            for _ in range(3):
                await asyncio.wait_for(server.infer(request()), CALL_TIMEOUT_S)
            times, deadline = [], time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                await asyncio.wait_for(server.infer(request()), CALL_TIMEOUT_S)
                times.append(time.perf_counter() - start)
            p50, p99 = percentiles_ms(times)
            rows.append({"batch": batch, "images_per_s": batch * len(times) / sum(times), "p50_ms": p50, "p99_ms": p99})
            print(f"  engine batch {batch:3}: {rows[-1]['images_per_s']:8.0f} img/s p50 {p50:.2f} ms", flush=True)
        one = rng.standard_normal((1, 3, image, image), dtype=np.float32)
        done, deadline = 0, time.perf_counter() + seconds

        async def caller() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                one_request = InferenceRequest(model_name=MODEL, inputs={"INPUT__0": one}, batch_size=1)
                await asyncio.wait_for(server.infer(one_request), CALL_TIMEOUT_S)
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(callers)))
        concurrent = {"callers": callers, "images_per_s": done / (time.perf_counter() - start)}
        print(f"  engine {callers} callers of batch 1: {concurrent['images_per_s']:.0f} img/s", flush=True)
    finally:
        await server.stop()
    return {"sequential": rows, "concurrent": concurrent}


def measure_http(repo: Path, image: int, concurrencies: list[int], seconds: float, log_folder: Path) -> list[dict]:
    """The standalone v2 app under uvicorn; binary bodies of one image from the loadgen, several processes."""
    port = free_port()
    spec = ServerSpec(
        "infera-gpu",
        uvicorn_command("engine.frontend.standalone:app", port),
        port,
        env={"INFERA_MODEL_REPOSITORY": str(repo)},
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
    rows = []
    with ServerProcess(spec, log_folder):
        path = f"/v2/models/{MODEL}/infer"
        run_load("127.0.0.1", port, path, body, headers, 8, 2.0)  # warm-up
        for connections in concurrencies:
            processes = max(1, min(8, connections // 8))
            result = run_load("127.0.0.1", port, path, body, headers, connections, seconds, processes)
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
                f"  http c={connections:3}: {result.rps:8.0f} req/s p50 {result.p50_ms:.2f} ms errors {result.errors}",
                flush=True,
            )
    return rows


def markdown(results: dict) -> str:
    """The GPU section of docs/benchmarks.md."""

    def table(headers, rows):
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
        return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows])

    s = results["system"]
    parts = [
        f"Measured {results['date']} on {s['gpu']} ({s['cpu_cores']} CPU cores), torch {s['torch']}, "
        f"{MODEL} TorchScript FP32 at {results['image']}×{results['image']}, one instance KIND_{results['kind']}, "
        f"dynamic batching (max {MAX_BATCH}, delay {results['queue_delay_us']} µs)."
    ]
    engine = {r["batch"]: r for r in results["engine"].get("sequential", [])} if "engine" in results else {}
    rows = []
    for d in results["direct"]:
        e = engine.get(d["batch"])
        rows.append(
            [
                d["batch"],
                f"{d['images_per_s']:.0f}",
                f"{d['p50_ms']:.2f}",
                f"{e['images_per_s']:.0f}" if e else "-",
                f"{e['p50_ms']:.2f}" if e else "-",
                f"{e['images_per_s'] / d['images_per_s']:.2f}" if e else "-",
            ]
        )
    parts.append(table(["batch", "torch img/s", "torch p50 ms", "engine img/s", "engine p50 ms", "engine/torch"], rows))
    if results.get("engine", {}).get("concurrent"):
        c = results["engine"]["concurrent"]
        parts.append(f"Engine, {c['callers']} concurrent callers of one image each: {c['images_per_s']:.0f} img/s.")
    if "engine_error" in results:
        parts.append(f"Engine: not available: {results['engine_error']}")
    if results.get("http"):
        parts.append(
            "HTTP (standalone v2 app under uvicorn, binary bodies of one image, Python load generator):\n\n"
            + table(
                ["connections", "req/s", "p50 ms", "p99 ms", "errors"],
                [
                    [r["connections"], f"{r['rps']:.0f}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", r["errors"]]
                    for r in results["http"]
                ],
            )
        )
    if "http_error" in results:
        parts.append(f"HTTP: not available: {results['http_error']}")
    if results.get("nvml"):
        parts.append(
            "NVML per phase:\n\n"
            + table(
                ["phase", "GPU util %", "memory GiB (max)", "power W", "temp °C (max)"],
                [
                    [
                        k,
                        f"{v['util_mean_pct']:.0f}",
                        f"{v['mem_max_gib']:.1f}",
                        f"{v['power_mean_w']:.0f}",
                        f"{v['temp_max_c']:.0f}",
                    ]
                    for k, v in results["nvml"].items()
                ],
            )
        )
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_bench", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench/results/gpu")))
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--batches", default="1,2,4,8,16,32,64,128,256")
    parser.add_argument("--seconds", type=float, default=3.0, help="per batch size, direct and engine each")
    parser.add_argument("--http-seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--queue-delay-us", type=int, default=QUEUE_DELAY_US)
    parser.add_argument("--quick", action="store_true", help="tiny: batches 1,2, 64 px, 1 s (a check, not figures)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.seconds, args.http_seconds, args.concurrency, args.image = "1,2", 1.0, 2.0, "1,4", 64
    batches = [int(b) for b in args.batches.split(",")]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device visible to torch", file=sys.stderr)
        return 2
    kind = "GPU" if args.device == "cuda" else "CPU"
    # the repository stays out of --out: only the results travel back from a GPU machine
    repo = write_model(
        torch, Path(tempfile.mkdtemp(prefix="infera-gpu-")), args.image, f"KIND_{kind}", args.queue_delay_us
    )
    sampler = NvmlSampler()
    results: dict = {
        "queue_delay_us": args.queue_delay_us,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "image": args.image,
        "kind": kind,
        "system": {
            "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else "no GPU (CPU check run)",
            "nvml_device": sampler.device,
            "cpu_cores": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "driver": _driver_version(),
        },
    }
    print("direct (torch)", flush=True)
    with sampler.phase("direct"):
        results["direct"] = measure_direct(torch, repo, args.device, batches, args.image, args.seconds)
    if args.device == "cuda":
        torch.cuda.empty_cache()
    print("engine in process", flush=True)
    try:
        with sampler.phase("engine"):
            results["engine"] = asyncio.run(_engine_runs(repo, batches, args.image, args.seconds, 64))
    except Exception as error:  # the engine is measured as it is; a failure is reported, not hidden
        results["engine_error"] = f"{type(error).__name__}: {error}"
        print(f"  engine failed: {results['engine_error']}", flush=True)
    print("HTTP", flush=True)
    try:
        with sampler.phase("http"):
            results["http"] = measure_http(repo, args.image, concurrencies, args.http_seconds, args.out)
    except Exception as error:
        results["http_error"] = f"{type(error).__name__}: {error}"
        print(f"  HTTP failed: {results['http_error']}", flush=True)
    results["nvml"] = sampler.summary()
    results["markdown"] = markdown(results)
    (args.out / "gpu_results.json").write_text(json.dumps(results, indent=1))
    (args.out / "gpu_results.md").write_text(results["markdown"] + "\n")
    print(results["markdown"])
    return 0


def _driver_version() -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return done.stdout.strip() or "-"
    except (OSError, subprocess.TimeoutExpired):
        return "-"


if __name__ == "__main__":
    sys.exit(main())
