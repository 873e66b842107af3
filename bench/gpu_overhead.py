"""Where a small batch's time goes on the GPU: the pytorch backend's execute with its parts switched off in turn.

`python -m bench.gpu_overhead` (on a GPU machine; `--device cpu` checks it here) traces bench.gpu_models' ResNet-50,
then times, at each batch size, one closed loop each of: torch's own loop (pinned staging, graph replay, copy down),
the backend's execute as it is, on the default stream, with pageable inputs, without graphs, and the engine's
InferenceServer.infer around it. Differences between rows are what each part costs. Prints a table; --out writes
gpu_overhead.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.gpu_direct import captured, timed_loop
from bench.gpu_models import MODEL, config_text, write_repository


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_overhead", description=__doc__)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--profile", action="store_true", help="cProfile the backend's execute at the first batch")
    args = parser.parse_args(argv)
    import torch

    from engine.backends.base import Device
    from engine.backends.pytorch import PyTorchBackend
    from engine.config.text_format import parse_config_pbtxt

    gpu = args.device == "cuda"
    kind = "KIND_GPU" if gpu else "KIND_CPU"
    work = Path(tempfile.mkdtemp(prefix="infera-gpu-overhead-"))
    write_repository(torch, work / "repo", work / "source", args.image, kind, 0, onnx=False)
    version = work / "repo" / MODEL / "1"
    config = parse_config_pbtxt(config_text(MODEL, "pytorch", 1, 256, kind, args.image, 0, {}))
    device = Device("GPU" if gpu else "CPU", 0)
    rows: list[dict] = []

    def backend(**changes) -> PyTorchBackend:
        loaded = PyTorchBackend(config, version, device)
        loaded.load()
        for name, value in changes.items():
            setattr(loaded, name, value)
        return loaded

    variants = {
        "execute": backend(),
        "execute, default stream": backend(_stream=None),
        "execute, pageable inputs": backend(_pinned=None),
        "execute, no graphs": backend(_graphs=None),
    }
    model = torch.jit.load(str(version / "model.pt"), map_location="cuda" if gpu else "cpu").eval()
    for batch in [int(b) for b in args.batches.split(",")]:
        array = np.random.default_rng(batch).standard_normal((batch, 3, args.image, args.image), dtype=np.float32)
        array.flags.writeable = False  # as a request decoded from a body
        if gpu:
            host = torch.empty(array.shape, dtype=torch.float32, pin_memory=True)
            with torch.inference_mode():
                static_in, graph, static_out = captured(torch, model, array.shape)

            def tuned(a=array, h=host, s=static_in, g=graph, o=static_out):
                np.copyto(h.numpy(), a)
                s.copy_(h, non_blocking=True)
                g.replay()
                return o.cpu().numpy()

            rows.append(
                {"batch": batch, "path": "torch alone (pinned, graph)", **timed_loop(tuned, batch, args.seconds)}
            )
        for label, loaded in variants.items():
            step = lambda a=array, b=loaded: b.execute({"INPUT__0": a})  # noqa: E731
            rows.append({"batch": batch, "path": label, **timed_loop(step, batch, args.seconds)})
        rows.append(
            {"batch": batch, "path": "InferenceServer.infer", **asyncio.run(_served(work / "repo", array, args))}
        )
    if args.profile:
        import cProfile
        import pstats

        array = np.random.default_rng(0).standard_normal(
            (int(args.batches.split(",")[0]), 3, args.image, args.image), dtype=np.float32
        )
        profiler = cProfile.Profile()
        profiler.runcall(timed_loop, lambda: variants["execute"].execute({"INPUT__0": array}), len(array), args.seconds)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    print(f"{'batch':>5}  {'path':34} {'p50 ms':>8} {'img/s':>8}")
    for row in rows:
        print(f"{row['batch']:5}  {row['path']:34} {row['p50_ms']:8.3f} {row['images_per_s']:8.0f}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_overhead.json").write_text(json.dumps(rows, indent=1))
    return 0


async def _served(repo: Path, array: np.ndarray, args: argparse.Namespace) -> dict:
    from engine.serving.server import InferenceServer
    from engine.types import InferenceRequest

    server = InferenceServer(repo)
    await server.start()
    try:
        request = lambda: InferenceRequest(model_name=MODEL, inputs={"INPUT__0": array}, batch_size=len(array))  # noqa: E731
        for _ in range(3):
            await server.infer(request())
        times, deadline = [], time.perf_counter() + args.seconds
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            await server.infer(request())
            times.append(time.perf_counter() - start)
    finally:
        await server.stop()
    p50 = float(np.percentile(np.asarray(times) * 1000, 50))
    return {"images_per_s": len(array) * len(times) / sum(times), "p50_ms": p50, "p99_ms": 0.0}


if __name__ == "__main__":
    sys.exit(main())
