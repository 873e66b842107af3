"""A real (numpy) plugin backend and a repository holding it, for tests that drive a running InferenceServer.

Y = 2 * X; a negative input makes the backend raise, so tests can count failures as well as successes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.backends import Backend, register_backend
from engine.config.model_config import DynamicBatching, ModelConfig, TensorConfig
from engine.types import InferenceRequest
from tests.engine.model_factory import to_pbtxt

MODEL_NAME = "doubler"


@register_backend
class DoublingBackend(Backend):
    """Doubles its input; refuses negative numbers."""

    name = "monitoring_doubler"

    def load(self) -> None:
        pass

    def execute(self, batch):
        x = batch["X"]
        if (x < 0).any():
            raise ValueError("negative input")
        return {"Y": x * 2}


def write_doubler(repo: Path, name: str = MODEL_NAME, versions: tuple[int, ...] = (1,)) -> Path:
    """`<repo>/<name>/config.pbtxt` and its version folders; returns the repository."""
    config = ModelConfig(
        name=name,
        backend=DoublingBackend.name,
        max_batch_size=8,
        input=[TensorConfig("X", "TYPE_FP32", [4])],
        output=[TensorConfig("Y", "TYPE_FP32", [4])],
        dynamic_batching=DynamicBatching(),
    )
    model_dir = Path(repo) / name
    for version in versions:
        (model_dir / str(version)).mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(to_pbtxt(config))
    return Path(repo)


def doubler_request(value: float, batch: int = 1, name: str = MODEL_NAME) -> InferenceRequest:
    return InferenceRequest(model_name=name, inputs={"X": np.full((batch, 4), value, np.float32)}, batch_size=batch)
