"""The peer: MLServer 1.7.1 in its own virtualenv, serving the bench's ONNX files with adaptive batching."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from bench.models import MODELS
from bench.servers import NotAvailable, ServerSpec, free_port

BENCH_DIR = Path(__file__).resolve().parent
VENV = BENCH_DIR / ".peers" / "mlserver-venv"
VENV_PYTHON = VENV / "bin" / "python"
# what `pip install mlserver==1.7.1 onnxruntime numpy` resolves to under Python 3.11, except uvloop: 0.22 and later
# raise in asyncio.get_event_loop() where MLServer 1.7.1 starts its parallel workers, so they die at start
PINS = ["mlserver==1.7.1", "onnxruntime==1.32.0", "numpy==2.4.6", "uvloop==0.21.0"]
MAX_BATCH_SIZE = 64
_DELAY = re.compile(r"max_queue_delay_microseconds:\s*(\d+)")


def batch_window_s(repository: Path, model: str) -> float:
    """MLServer's max_batch_time for `model`: the same window Infera's batcher waits (its config's queue delay).

    0 leaves MLServer's adaptive batching off, where Infera's batcher sends at once whatever is queued.
    """
    match = _DELAY.search((repository / model / "config.pbtxt").read_text())
    return int(match.group(1)) / 1e6 if match else 0.0


def venv_missing() -> str | None:
    """Why MLServer cannot run here, or None when its virtualenv is ready."""
    if not VENV_PYTHON.exists():
        return f"no MLServer virtualenv at {VENV} (run `python -m bench --setup-peers`)"
    done = subprocess.run([str(VENV_PYTHON), "-c", "import mlserver, onnxruntime"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"the MLServer virtualenv is broken: {done.stderr.strip()[-300:]}"
    return None


def setup_venv(python: str = "python3.11") -> None:
    """Create bench/.peers/mlserver-venv and install the pinned MLServer into it (needs the package registry)."""
    interpreter = shutil.which(python)
    if interpreter is None:
        raise NotAvailable(f"{python} is not on PATH; MLServer 1.7.1 needs Python 3.9 to 3.12")
    VENV.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([interpreter, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(VENV_PYTHON), "-m", "pip", "install", "-q", *PINS], check=True)


def mlserver_version() -> str:
    """MLServer's version in its virtualenv, or '-' when absent."""
    if venv_missing():
        return "-"
    done = subprocess.run(
        [str(VENV_PYTHON), "-c", "import mlserver; print(mlserver.__version__)"], capture_output=True, text=True
    )
    return done.stdout.strip() or "-"


def write_settings(
    folder: Path, repository: Path, models: list[str], port: int, parallel_workers: int, grpc_port: int = 0
) -> None:
    """settings.json and one model-settings.json per model, pointing at the repository's version 1 ONNX files."""
    folder.mkdir(parents=True, exist_ok=True)
    settings = {
        "debug": False,
        "host": "127.0.0.1",
        "http_port": port,
        "grpc_port": grpc_port or free_port(),
        "metrics_port": free_port(),
        "parallel_workers": parallel_workers,
        "load_models_at_startup": True,
        "metrics_dir": str(folder / ".metrics"),
        "environments_dir": str(folder / ".envs"),
    }
    (folder / "settings.json").write_text(json.dumps(settings, indent=2))
    for name in models:
        model = MODELS[name]
        model_folder = folder / name
        model_folder.mkdir(exist_ok=True)
        model_settings = {
            "name": name,
            "implementation": "mlserver_runtime.OnnxRuntimeModel",
            "max_batch_size": MAX_BATCH_SIZE if model.max_batch_size >= MAX_BATCH_SIZE else model.max_batch_size,
            "max_batch_time": batch_window_s(repository, name),
            "parameters": {"uri": str(repository / name / "1" / "model.onnx"), "version": "1"},
        }
        (model_folder / "model-settings.json").write_text(json.dumps(model_settings, indent=2))


def mlserver_spec(
    folder: Path, repository: Path, models: list[str], port: int, parallel_workers: int = 1, grpc_port: int = 0
) -> ServerSpec:
    """The ServerSpec of `mlserver start` over a generated settings folder; NotAvailable without the venv."""
    missing = venv_missing()
    if missing:
        raise NotAvailable(missing)
    write_settings(folder, repository, models, port, parallel_workers, grpc_port)
    # only the runtime goes on MLServer's path: bench/ itself holds modules that would shadow its imports
    runtime_folder = folder / "runtime"
    runtime_folder.mkdir(exist_ok=True)
    shutil.copy(BENCH_DIR / "mlserver_runtime.py", runtime_folder / "mlserver_runtime.py")
    command = [str(VENV / "bin" / "mlserver"), "start", str(folder)]
    env = {"PYTHONPATH": str(runtime_folder), "MLSERVER_DEBUG": "false"}
    # readiness of the last model means every model has loaded
    ready = f"/v2/models/{models[-1]}/ready"
    return ServerSpec("mlserver", command, port, ready_path=ready, env=env, cwd=folder, ready_timeout_s=180)
