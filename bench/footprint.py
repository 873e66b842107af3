"""What a running process holds, read from /proc: resident memory, threads, open file descriptors, child processes.

The soak samples it over time; the hygiene tests compare it before and after thousands of operations. Linux only.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Footprint:
    """One reading of a process: RSS (KiB), threads, open fds, and its direct children (zombies included)."""

    rss_kb: int
    threads: int
    fds: int
    children: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def footprint(pid: int) -> Footprint:
    """Read `pid`'s footprint now; OSError when the process is gone."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.strip()
    return Footprint(
        rss_kb=int(fields["VmRSS"].split()[0]),
        threads=int(fields["Threads"]),
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        children=len(child_pids(pid)),
    )


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid`, exited ones not yet reaped (zombies) included."""
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _parent_of(entry) == pid:
            children.append(int(entry))
    return sorted(children)


def _parent_of(entry: str) -> int | None:
    try:
        stat = Path(f"/proc/{entry}/stat").read_text()
    except OSError:  # it exited while the folder was read
        return None
    # the command name (field 2) may hold spaces and parentheses: the fields after its last ')' are plain
    return int(stat.rsplit(")", 1)[1].split()[1])


# ---- the footprint section: load/unload cycles of one model per backend, each in a fresh process

TORCHSCRIPT_CONFIG = """name: "ts_linear"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 256 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
BACKEND_MODELS = {"onnx": "mlp_medium", "torchscript": "ts_linear", "python": "py_add_sub"}


def write_cycle_models(root: Path) -> Path:
    """One model per backend under `root`: the bench's ONNX mlp_medium, a TorchScript linear layer, add_sub."""
    import torch

    from bench.models import write_python_repository, write_repository

    write_repository(root, ["mlp_medium"])
    write_python_repository(root)
    folder = root / "ts_linear"
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(TORCHSCRIPT_CONFIG)
    torch.manual_seed(0)
    torch.jit.save(torch.jit.script(torch.nn.Linear(256, 16).eval()), str(folder / "1" / "model.pt"))
    return root


def _request(model: str):
    import numpy as np

    from engine.types import InferenceRequest

    if model == "py_add_sub":
        inputs = {"INPUT0": np.ones((1, 16), np.int32), "INPUT1": np.ones((1, 16), np.int32)}
    else:
        inputs = {("INPUT__0" if model == "ts_linear" else "INPUT0"): np.ones((1, 256), np.float32)}
    return InferenceRequest(model_name=model, inputs=inputs, batch_size=1)


async def run_cycles(root: Path, model: str, cycles: int, gpus: int = 0) -> dict:
    """Load, infer once and unload `model` `cycles` times in this process: its footprint at the start (after one
    warm cycle), the end, and the highest RSS on the way (read every tenth of the run)."""
    import time

    from engine.serving.memory_budget import gpu_used_bytes
    from engine.serving.server import InferenceServer

    server = InferenceServer(root, gpu_count=gpus)
    await server.start(load_models=False)

    async def cycle() -> None:
        await server.load_model(model)
        await server.infer(_request(model))
        await server.unload_model(model)

    await cycle()
    start, gpu_start = footprint(os.getpid()), gpu_used_bytes(0) if gpus else 0
    highest, began = start.rss_kb, time.monotonic()
    for i in range(cycles):
        await cycle()
        if i % max(cycles // 10, 1) == 0:
            highest = max(highest, footprint(os.getpid()).rss_kb)
    end = footprint(os.getpid())
    row = {
        "model": model,
        "cycles": cycles,
        "seconds": round(time.monotonic() - began, 1),
        "start": start.as_dict(),
        "end": end.as_dict(),
        "rss_growth_mib": round((end.rss_kb - start.rss_kb) / 1024, 1),
        "rss_highest_mib": round(highest / 1024, 1),
    }
    if gpus:
        row["gpu_growth_mib"] = round((gpu_used_bytes(0) - gpu_start) / (1 << 20), 1)
    await server.stop()
    return row


def footprint_section(workdir: Path, cycles: dict[str, int], gpus: int = 0) -> dict:
    """Each backend's cycles in a fresh `python -m bench.footprint` process (so no run inherits another's)."""
    import json
    import subprocess
    import sys

    root = write_cycle_models(workdir / "footprint")
    rows = []
    for backend, count in cycles.items():
        print(f"  {backend}: {count} load/unload cycles", flush=True)
        command = [sys.executable, "-m", "bench.footprint", str(root), BACKEND_MODELS[backend], str(count), str(gpus)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
        if done.returncode != 0:
            rows.append({"backend": backend, "unavailable": done.stderr.strip().splitlines()[-1:]})
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1]) | {"backend": backend}
        print(
            f"    RSS {row['rss_growth_mib']:+.1f} MiB, threads {row['start']['threads']} -> "
            f"{row['end']['threads']}, fds {row['start']['fds']} -> {row['end']['fds']}",
            flush=True,
        )
        rows.append(row)
    return {"rows": rows}


if __name__ == "__main__":
    import asyncio
    import json
    import sys

    folder, name, count, devices = sys.argv[1:5]
    print(json.dumps(asyncio.run(run_cycles(Path(folder), name, int(count), int(devices)))))
