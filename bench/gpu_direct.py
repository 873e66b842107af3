"""The GPU bench's direct ceilings: torch alone (as a user writes it, and hand-tuned with pinned staging and CUDA
graphs), onnxruntime alone (session.run and IO binding), and one batch's copy up to the GPU three ways."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


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


def print_rate(label: str, row: dict) -> None:
    """One closed loop's images/s and p50, as the run goes."""
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
            print_rate("torch plain", plain[-1])
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
            print_rate("torch tuned", tuned[-1])
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
        print_rate("onnxruntime run", run[-1])

        def step(a=array):
            binding = session.io_binding()
            binding.bind_ortvalue_input("INPUT__0", ort.OrtValue.ortvalue_from_numpy(a, where, 0))
            binding.bind_output("OUTPUT__0", where, 0)
            session.run_with_iobinding(binding)
            return binding.copy_outputs_to_cpu()

        bound.append(timed_loop(step, batch, seconds))
        print_rate("onnxruntime io binding", bound[-1])
    return {"run": run, "io_binding": bound, "providers": session.get_providers()}
