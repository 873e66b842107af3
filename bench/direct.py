"""The direct ceiling: in-process onnxruntime `session.run` throughput with the servers' thread settings."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from bench.models import MODELS, sample_inputs


def cpu_session(model_path: Path | str) -> ort.InferenceSession:
    """A CPU session with one intra-op and one inter-op thread, as the bench configs ask of every server."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


def time_runs(session: ort.InferenceSession, feeds: dict[str, np.ndarray], seconds: float) -> tuple[int, float]:
    """Call session.run back to back for about `seconds`; return (calls, elapsed seconds)."""
    for _ in range(3):
        session.run(None, feeds)
    calls = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        session.run(None, feeds)
        calls += 1
        now = time.perf_counter()
        if now >= deadline:
            return calls, now - start


def measure_direct(repository: Path, model_name: str, batch_sizes: list[int], seconds: float) -> list[dict]:
    """Inferences per second and mean call time of session.run for each batch size (median of three)."""
    model = MODELS[model_name]
    session = cpu_session(repository / model_name / "1" / "model.onnx")
    rows = []
    for batch in batch_sizes:
        if batch > model.max_batch_size:
            continue
        feeds = sample_inputs(model, batch)
        runs = [time_runs(session, feeds, seconds / 3) for _ in range(3)]
        rates = sorted(calls * batch / elapsed for calls, elapsed in runs)
        call_us = sorted(elapsed / calls * 1e6 for calls, elapsed in runs)
        rows.append({"model": model_name, "batch": batch, "infer_per_s": rates[1], "call_us": call_us[1]})
    return rows
