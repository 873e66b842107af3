"""The GPU path (run by bench/gpu.sh): a ResNet-50-sized CNN, direct and in the engine, torch and onnxruntime, HTTP.

One run, side by side, on one GPU:
- torch alone, as a user writes it (pageable host arrays, eager) and hand-tuned (pinned staging, a CUDA graph per
  batch size): the two ceilings the engine's pytorch backend is held to;
- onnxruntime alone on its CUDA provider, session.run and IO binding, where the onnxruntime there has the provider;
- the engine in process on the same files: sequential batches, graphs on and off, 64 callers of one image on one
  and two instances, and 4 callers of batch 64 on one and two instances (what overlap buys);
- the standalone v2 app under uvicorn, binary bodies of one image, with /metrics scraped under load (the NVML
  gauges the console's /monitoring/ charts read);
- NVML's utilisation, memory, power and temperature per phase.

Writes gpu_results.json and gpu_results.md under --out. `--device cpu --quick` runs the same code small on a
machine without a GPU, to check it before a GPU session spends its minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.gpu_direct import measure_ort, measure_torch, measure_transfers, ort_cuda_available
from bench.gpu_models import TARGET_BATCH, VARIANTS, write_repository
from bench.gpu_section import markdown, ratios
from bench.gpu_served import measure_engine, measure_http

QUEUE_DELAY_US = 500
CALLERS = 64


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


def guarded(results: dict, key: str, label: str, run: Callable[[], object]) -> None:
    """Measure one part; a failure is recorded under `<key>_error` and the run goes on to the next part."""
    try:
        results[key] = run()
    except Exception as error:  # the engine is measured as it is; a failure is reported, not hidden
        results[f"{key}_error"] = f"{type(error).__name__}: {error}"
        print(f"  {label} failed: {results[f'{key}_error']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_bench", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench/results/gpu")))
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--batches", default="1,8,32,64,128")
    parser.add_argument("--seconds", type=float, default=2.0, help="each closed loop, direct and engine")
    parser.add_argument("--http-seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--queue-delay-us", type=int, default=QUEUE_DELAY_US)
    parser.add_argument("--quick", action="store_true", help="tiny: batches 1,2, 32 px, short loops (a check)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.seconds, args.http_seconds, args.concurrency, args.image = "1,2", 0.3, 1.0, "1,4", 32
    batches = [int(b) for b in args.batches.split(",")]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device visible to torch", file=sys.stderr)
        return 2
    kind = "GPU" if args.device == "cuda" else "CPU"
    ort_ok, ort_line = ort_cuda_available() if args.device == "cuda" else (True, "onnxruntime on the CPU (check)")
    # the repository stays out of --out: only the results travel back from a GPU machine
    work = Path(tempfile.mkdtemp(prefix="infera-gpu-"))
    repo = work / "repository"
    files = write_repository(torch, repo, work / "source", args.image, f"KIND_{kind}", args.queue_delay_us, ort_ok)
    sampler = NvmlSampler()
    results: dict = {
        "queue_delay_us": args.queue_delay_us,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "image": args.image,
        "seconds": args.seconds,
        "kind": kind,
        "system": {
            "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else "no GPU (CPU check run)",
            "nvml_device": sampler.device,
            "cpu_cores": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "onnxruntime": ort_line,
            "driver": _driver_version(),
        },
    }
    print(f"{results['system']}", flush=True)

    def part(key: str, phase: str, run: Callable[[], object]) -> None:
        print(phase, flush=True)
        with sampler.phase(phase):
            guarded(results, key, phase, run)

    part(
        "torch",
        "torch alone",
        lambda: measure_torch(torch, files["pt"], args.device, batches, args.image, args.seconds),
    )
    if args.device == "cuda":
        part(
            "transfers",
            "transfers up",
            lambda: measure_transfers(torch, args.image, sorted({1, TARGET_BATCH, max(batches)})),
        )
    if ort_ok:
        ort_batches = [b for b in batches if b in (1, TARGET_BATCH)] or batches[-1:]
        part(
            "onnxruntime",
            "onnxruntime alone",
            lambda: measure_ort(files["onnx"], args.device, ort_batches, args.image, args.seconds),
        )
    else:
        results["onnxruntime_error"] = ort_line
    models = [m for m in VARIANTS if (repo / m).is_dir()]
    part(
        "engine",
        "engine",
        lambda: asyncio.run(measure_engine(repo, models, batches, args.image, args.seconds, CALLERS)),
    )
    if args.device == "cuda":
        torch.cuda.empty_cache()
    part(
        "http",
        "http",
        lambda: measure_http(repo, args.image, concurrencies, args.http_seconds, args.out, args.queue_delay_us),
    )
    shutil.rmtree(work, ignore_errors=True)
    results["nvml"] = sampler.summary()
    results["ratios"] = ratios(results)
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
