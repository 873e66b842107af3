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
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.loadgen import run_load
from bench.servers import ServerProcess, ServerSpec, free_port, uvicorn_command

MODEL = "resnet50"
MAX_BATCH = 256
QUEUE_DELAY_US = 500
CALL_TIMEOUT_S = 60.0  # one call slower than this is a hang: reported, so the device minutes are not spent waiting
TARGET_BATCH = 64  # issue 23: the engine at >= 0.9x of direct torch / onnxruntime CUDA throughput at this batch
CALLERS = 64
WARM_CONCURRENT_S = 1.0  # concurrent callers run this long untimed first
# the engine's models, all from one traced file: name -> (backend, instances, max batch, extra parameters, window).
# One caller's sequential batches are held to torch alone, which waits for no one: those models batch with no
# queue delay (equal settings); the concurrent ones wait --queue-delay-us for a batch to fill, as HTTP's model does.
VARIANTS = {
    "resnet50": ("pytorch", 1, MAX_BATCH, {}, False),
    "resnet50_eager": ("pytorch", 1, MAX_BATCH, {"CUDA_GRAPHS": "false"}, False),
    "resnet50_b64": ("pytorch", 1, TARGET_BATCH, {}, True),
    "resnet50_b64_x2": ("pytorch", 2, TARGET_BATCH, {}, True),
    "resnet50_onnx": ("onnxruntime", 1, MAX_BATCH, {}, False),
}


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


def config_text(
    name: str,
    backend: str,
    instances: int,
    max_batch: int,
    kind: str,
    image: int,
    delay_us: int,
    parameters: dict[str, str],
) -> str:
    """A Triton config.pbtxt for one variant: the dynamic batcher on, instances on GPU 0 (or the CPU)."""
    gpus = " gpus: [ 0 ]" if kind == "KIND_GPU" else ""
    platform_line = 'platform: "pytorch_libtorch"' if backend == "pytorch" else 'platform: "onnxruntime_onnx"'
    lines = [
        f'name: "{name}"',
        platform_line,
        f"max_batch_size: {max_batch}",
        f'input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, {image}, {image} ] }} ]',
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1000 ] } ]',
        f"instance_group [ {{ count: {instances} kind: {kind}{gpus} }} ]",
        f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}",
    ]
    lines += [f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in parameters.items()]
    return "\n".join(lines) + "\n"


def write_repository(
    torch, root: Path, source: Path, image: int, kind: str, delay_us: int, onnx: bool
) -> dict[str, Path]:
    """Trace (and export to ONNX where wanted) the CNN once into `source`; one folder per variant under `root`, a
    Triton repository. Returns the model files by format ('pt', and 'onnx' when exported)."""
    files: dict[str, Path] = {}
    source.mkdir(parents=True, exist_ok=True)
    model = build_resnet(torch)
    example = torch.zeros(1, 3, image, image)
    with torch.inference_mode():
        torch.jit.trace(model, example).save(str(source / "model.pt"))
    files["pt"] = source / "model.pt"
    if onnx:
        with warnings.catch_warnings():  # the TorchScript exporter is deprecated; it needs no onnxscript
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                (example,),
                str(source / "model.onnx"),
                input_names=["INPUT__0"],
                output_names=["OUTPUT__0"],
                dynamic_axes={"INPUT__0": {0: "batch"}, "OUTPUT__0": {0: "batch"}},
                opset_version=17,
                dynamo=False,
            )
        files["onnx"] = source / "model.onnx"
    for name, (backend, instances, max_batch, parameters, window) in VARIANTS.items():
        fmt = "pt" if backend == "pytorch" else "onnx"
        if fmt not in files:
            continue
        folder = root / name
        (folder / "1").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(files[fmt], folder / "1" / files[fmt].name)
        delay = delay_us if window else 0
        (folder / "config.pbtxt").write_text(
            config_text(name, backend, instances, max_batch, kind, image, delay, parameters)
        )
    return files


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


def timed_loop(step: Callable[[], object], batch: int, seconds: float, warmup: int = 3) -> dict:
    """Call `step` (one batch, its result on the host) in a closed loop for `seconds` after `warmup` calls."""
    for _ in range(warmup):
        step()
    times, deadline = [], time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    p50, p99 = percentiles_ms(times)
    return {"batch": batch, "images_per_s": batch * len(times) / sum(times), "p50_ms": p50, "p99_ms": p99}


def _say(label: str, row: dict) -> None:
    print(f"  {label} batch {row['batch']:3}: {row['images_per_s']:8.0f} img/s p50 {row['p50_ms']:.2f} ms", flush=True)


def captured(torch, model, shape: tuple[int, ...]) -> tuple:
    """`model` captured in a CUDA graph on a static float32 input of `shape`: (input, graph, output)."""
    static_in = torch.empty(shape, dtype=torch.float32, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up runs off the capture stream, as torch's documentation asks
            model(static_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = model(static_in)
    return static_in, graph, static_out


def measure_torch(torch, model_file: Path, device: str, batches: list[int], image: int, seconds: float) -> dict:
    """torch alone on the traced file, host arrays in and out as the engine must take and give them.

    plain: `torch.from_numpy(x).to(device)` and an eager call, as a user writes it. tuned: the batch copied into
    a pinned buffer (by the engine's HostCopier), one asynchronous copy up, a CUDA graph replayed, the output
    copied down: what the engine's pytorch backend does on a GPU, written by hand without a server around it.
    """
    from engine.backends.gpu_transfers import HostCopier

    model = torch.jit.load(str(model_file), map_location=device).eval()
    rng = np.random.default_rng(0)
    plain, tuned = [], []
    copier = HostCopier()  # the engine's staging copy, so "tuned" stages as the engine does
    with torch.inference_mode():
        for batch in batches:
            array = rng.standard_normal((batch, 3, image, image), dtype=np.float32)
            plain.append(
                timed_loop(lambda a=array: model(torch.from_numpy(a).to(device)).cpu().numpy(), batch, seconds)
            )
            _say("torch plain", plain[-1])
            if device != "cuda":
                continue
            host = torch.empty(array.shape, dtype=torch.float32, pin_memory=True)
            host_array = host.numpy()
            static_in, graph, static_out = captured(torch, model, array.shape)

            def step(a=array, host=host, host_array=host_array, static_in=static_in, graph=graph, out=static_out):
                copier.copy([a], host_array)
                static_in.copy_(host, non_blocking=True)
                graph.replay()
                return out.cpu().numpy()

            tuned.append(timed_loop(step, batch, seconds))
            _say("torch tuned", tuned[-1])
            del graph, static_in, static_out, host, host_array
    copier.close()
    return {"plain": plain, "tuned": tuned}  # the model and its memory go with this frame


def measure_transfers(torch, image: int, batches: list[int], repeats: int = 20) -> list[dict]:
    """One batch of images up to the GPU, three ways (median ms of `repeats`): pageable `.to()` (the driver
    stages it), one thread's memcpy into pinned memory then a DMA, and the engine's HostCopier then a DMA."""
    from engine.backends.gpu_transfers import HostCopier

    copier, rows = HostCopier(), []
    for batch in batches:
        array = np.random.default_rng(1).standard_normal((batch, 3, image, image), dtype=np.float32)
        host = torch.empty(array.shape, dtype=torch.float32, pin_memory=True)
        host_array = host.numpy()
        device_copy = torch.empty(array.shape, dtype=torch.float32, device="cuda")

        def pageable(a=array, d=device_copy):
            d.copy_(torch.from_numpy(a))

        def one_thread(a=array, h=host, ha=host_array, d=device_copy):
            np.copyto(ha, a)
            d.copy_(h, non_blocking=True)

        def threads(a=array, h=host, ha=host_array, d=device_copy):
            copier.copy([a], ha)
            d.copy_(h, non_blocking=True)

        row = {"batch": batch, "mbytes": array.nbytes / 1e6}
        for label, step in (("pageable", pageable), ("pinned_one_thread", one_thread), ("pinned_threads", threads)):
            times = []
            for _ in range(repeats + 2):
                start = time.perf_counter()
                step()
                torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            row[label] = float(np.median(times[2:]) * 1000)
        rows.append(row)
        print(
            f"  transfer batch {batch:3} ({row['mbytes']:.1f} MB): pageable {row['pageable']:.2f} ms, pinned one "
            f"thread {row['pinned_one_thread']:.2f} ms, pinned {copier.threads} threads {row['pinned_threads']:.2f} ms",
            flush=True,
        )
    copier.close()
    return rows


def ort_cuda_available() -> tuple[bool, str]:
    try:
        import onnxruntime as ort
    except ImportError as error:
        return False, f"onnxruntime is not installed: {error}"
    providers = ort.get_available_providers()
    if "CUDAExecutionProvider" not in providers:
        return False, f"onnxruntime {ort.__version__} has no CUDA provider (available: {', '.join(providers)})"
    return True, f"onnxruntime {ort.__version__}"


def measure_ort(model_file: Path, device: str, batches: list[int], image: int, seconds: float) -> dict:
    """onnxruntime alone: session.run on host arrays, and an IO binding (input up once, outputs on the device)."""
    import onnxruntime as ort

    providers: list = ["CPUExecutionProvider"]
    if device == "cuda":
        providers = [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"]
    session = ort.InferenceSession(str(model_file), providers=providers)
    where = "cuda" if device == "cuda" else "cpu"
    rng = np.random.default_rng(0)
    run, bound = [], []
    for batch in batches:
        array = rng.standard_normal((batch, 3, image, image), dtype=np.float32)
        run.append(timed_loop(lambda a=array: session.run(["OUTPUT__0"], {"INPUT__0": a}), batch, seconds))
        _say("onnxruntime run", run[-1])

        def step(a=array):
            binding = session.io_binding()
            binding.bind_ortvalue_input("INPUT__0", ort.OrtValue.ortvalue_from_numpy(a, where, 0))
            binding.bind_output("OUTPUT__0", where, 0)
            session.run_with_iobinding(binding)
            return binding.copy_outputs_to_cpu()

        bound.append(timed_loop(step, batch, seconds))
        _say("onnxruntime io binding", bound[-1])
    return {"run": run, "io_binding": bound, "providers": session.get_providers()}


def _counts(server, name: str) -> tuple[int, int]:
    stats = server.statistics(name)["model_stats"][0]
    return stats["inference_count"], stats["execution_count"]


async def _engine_runs(
    repo: Path, models: list[str], batches: list[int], image: int, seconds: float, callers: int
) -> dict:
    from engine.server import InferenceServer
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
                _say(f"engine {model}", result["sequential"][model][-1])
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
        env={"INFERA_MODEL_REPOSITORY": str(only)},
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


def row_at(rows: list[dict], batch: int) -> dict | None:
    return next((r for r in rows if r["batch"] == batch), None)


def ratios(results: dict) -> list[dict]:
    """The engine over each direct ceiling at TARGET_BATCH (or the largest batch measured)."""
    out = []
    sequential = results.get("engine", {}).get("sequential", {})
    direct = results.get("torch", {})
    batch = (
        TARGET_BATCH
        if row_at(direct.get("plain", []), TARGET_BATCH)
        else max((r["batch"] for r in direct.get("plain", [])), default=TARGET_BATCH)
    )
    pairs = [
        ("engine pytorch (graphs) / torch plain", sequential.get("resnet50"), direct.get("plain")),
        ("engine pytorch (graphs) / torch tuned", sequential.get("resnet50"), direct.get("tuned")),
        ("engine pytorch (no graphs) / torch plain", sequential.get("resnet50_eager"), direct.get("plain")),
    ]
    ort = results.get("onnxruntime", {})
    pairs += [
        ("engine onnxruntime / onnxruntime run", sequential.get("resnet50_onnx"), ort.get("run")),
        ("engine onnxruntime / onnxruntime io binding", sequential.get("resnet50_onnx"), ort.get("io_binding")),
    ]
    for label, engine_rows, direct_rows in pairs:
        e, d = row_at(engine_rows or [], batch), row_at(direct_rows or [], batch)
        if e and d:
            out.append(
                {
                    "pair": label,
                    "batch": batch,
                    "engine": e["images_per_s"],
                    "direct": d["images_per_s"],
                    "ratio": e["images_per_s"] / d["images_per_s"],
                }
            )
    return out


def markdown(results: dict) -> str:
    """The GPU section of docs/benchmarks.md."""

    def table(headers, rows):
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
        return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows])

    def rate(row):
        return f"{row['images_per_s']:.0f} ({row['p50_ms']:.2f} ms)" if row else "-"

    s = results["system"]
    parts = [
        f"Measured {results['date']} on {s['gpu']} (driver {s['driver']}, {s['cpu_cores']} CPU cores), "
        f"Python {s['python']}, torch {s['torch']}, {s.get('onnxruntime', 'no onnxruntime')}; "
        f"{MODEL} (25.6 M parameters) FP32 at {results['image']}×{results['image']}, torch's default "
        f"math (cuDNN convolutions in TF32); engine models on GPU 0 with dynamic batching: one caller's batches "
        f"with no queue delay (torch alone waits for no one), concurrent callers and HTTP with "
        f"{results['queue_delay_us']} µs. Each figure: a closed loop of {results['seconds']:g} s after 3 warm-up "
        "calls; images/s with the p50 of one call in brackets. `python -m bench.gpu_bench`, run by `bench/gpu.sh`."
    ]
    if results.get("ratios"):
        parts.append(
            "Engine over direct, one caller, batch "
            f"{results['ratios'][0]['batch']} (issue 23's goal: ≥ 0.9×):\n\n"
            + table(
                ["pair", "engine img/s", "direct img/s", "ratio"],
                [
                    [r["pair"], f"{r['engine']:.0f}", f"{r['direct']:.0f}", f"{r['ratio']:.2f}×"]
                    for r in results["ratios"]
                ],
            )
        )
    torch_rows = results.get("torch", {})
    sequential = results.get("engine", {}).get("sequential", {})
    ort = results.get("onnxruntime", {})
    batches = [r["batch"] for r in torch_rows.get("plain", [])]
    columns = [
        ("torch plain", torch_rows.get("plain", [])),
        ("torch tuned", torch_rows.get("tuned", [])),
        ("engine pytorch", sequential.get("resnet50", [])),
        ("engine pytorch, no graphs", sequential.get("resnet50_eager", [])),
        ("onnxruntime run", ort.get("run", [])),
        ("onnxruntime io binding", ort.get("io_binding", [])),
        ("engine onnxruntime", sequential.get("resnet50_onnx", [])),
    ]
    columns = [(label, rows) for label, rows in columns if rows]
    parts.append(
        "One caller, one batch at a time (images/s, p50 ms):\n\n"
        + table(
            ["batch", *[c[0] for c in columns]], [[b, *[rate(row_at(rows, b)) for _, rows in columns]] for b in batches]
        )
    )
    if "onnxruntime_error" in results:
        parts.append(f"onnxruntime on CUDA: not measured: {results['onnxruntime_error']}")
    if results.get("transfers"):
        parts.append(
            "One batch up to the GPU (median ms of 20; pinned: page-locked memory, then one DMA):\n\n"
            + table(
                ["batch", "MB", "pageable .to()", "memcpy, 1 thread + DMA", "engine's HostCopier + DMA"],
                [
                    [
                        r["batch"],
                        f"{r['mbytes']:.1f}",
                        f"{r['pageable']:.2f}",
                        f"{r['pinned_one_thread']:.2f}",
                        f"{r['pinned_threads']:.2f}",
                    ]
                    for r in results["transfers"]
                ],
            )
        )
    concurrent = results.get("engine", {}).get("concurrent", [])
    if concurrent:
        parts.append(
            "Engine, concurrent callers (max_batch_size 64; one instance against two on the same GPU, each on a "
            "CUDA stream of its own):\n\n"
            + table(
                ["model", "instances", "callers × batch", "img/s", "mean batch executed"],
                [
                    [
                        r["model"],
                        r["instances"],
                        f"{r['callers']} × {r['batch']}",
                        f"{r['images_per_s']:.0f}",
                        f"{r['mean_batch']:.1f}",
                    ]
                    for r in concurrent
                ],
            )
        )
    for key, label in (
        ("engine_error", "Engine"),
        ("http_error", "HTTP"),
        ("torch_error", "torch"),
        ("transfers_error", "Transfers"),
    ):
        if key in results:
            parts.append(f"{label}: not available: {results[key]}")
    http = results.get("http", {})
    if http.get("rows"):
        parts.append(
            "HTTP (standalone v2 app under uvicorn serving resnet50 alone, binary bodies of one image, Python load "
            "generator in several processes):\n\n"
            + table(
                ["connections", "req/s", "p50 ms", "p99 ms", "errors"],
                [
                    [r["connections"], f"{r['rps']:.0f}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", r["errors"]]
                    for r in http["rows"]
                ],
            )
        )
    scraped = http.get("metrics_under_load")
    if scraped:
        used = scraped.get("nv_gpu_memory_used_bytes", 0) / 2**30
        total = scraped.get("nv_gpu_memory_total_bytes", 0) / 2**30
        parts.append(
            f"`/metrics` scraped mid-run at the most connections: nv_gpu_utilization "
            f"{scraped.get('nv_gpu_utilization', float('nan')):.2f}, memory {used:.1f} of {total:.1f} GiB, "
            f"power {scraped.get('nv_gpu_power_usage', float('nan')):.0f} W: the gauges the console's "
            "/monitoring/ charts read."
        )
    if results.get("nvml"):
        parts.append(
            "NVML per phase (sampled every 100 ms by the bench itself):\n\n"
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
        "engine", "engine", lambda: asyncio.run(_engine_runs(repo, models, batches, args.image, args.seconds, CALLERS))
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
