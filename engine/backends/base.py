"""The contract every backend fulfils: load one model version on one device, execute one batch."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from engine.config.model_config import ModelConfig
from engine.errors import LoadError
from engine.types import InferenceRequest


@dataclass(frozen=True, slots=True)
class Device:
    """Where an instance runs: the CPU or one GPU by index."""

    kind: str = "CPU"
    id: int = 0

    @property
    def is_gpu(self) -> bool:
        return self.kind == "GPU"

    def __str__(self) -> str:
        return f"cuda:{self.id}" if self.is_gpu else "cpu"


@dataclass(frozen=True, slots=True)
class InstanceFailure:
    """An instance that can serve no more (its runtime failed past one batch): which one, and why."""

    instance_name: str
    reason: str


@dataclass(frozen=True, slots=True)
class InstanceContext:
    """Where a backend runs: its instance's Triton name, what the engine offers model code (None in a trial), and
    where it reports that it failed for good (`Backend.report_failure`; None in a trial)."""

    instance_name: str = ""
    services: Any = None  # an engine.serving.model_services.ModelServices when the version serves
    on_failure: Callable[[InstanceFailure], None] | None = None  # from any thread


class Backend(ABC):
    """One loaded model version on one device. Knows nothing of queues; one worker thread calls it.

    The instance worker calls `prepare` (compute_input), `execute` (compute_infer) and `split`
    (compute_output) so each phase is timed on its own. Tensor backends keep the defaults: requests are
    concatenated along the batch dimension and outputs are sliced back per request.
    """

    name: ClassVar[str] = ""
    # whether a very cheap batch may run on the event loop's thread (engine.serving.instances): only for runtimes that
    # never call back into the loop from `execute` (a python model's BLS call waits on the loop: never inline)
    runs_on_loop: ClassVar[bool] = False

    def __init__(
        self, config: ModelConfig, version_path: Path, device: Device, context: InstanceContext | None = None
    ) -> None:
        self.config = config
        self.version_path = Path(version_path)
        self.device = device
        self.context = context or InstanceContext(f"{config.name}_0_0")

    @property
    def model_path(self) -> Path:
        return self.version_path / self.config.model_filename

    @abstractmethod
    def load(self) -> None:
        """Read the model file and make it ready to execute; raise with a reason on failure."""

    @abstractmethod
    def execute(self, batch: Any) -> Any:
        """Run one prepared batch and return what `split` takes."""

    def unload(self) -> None:  # noqa: B027 - most runtimes free themselves when dropped
        """Release the runtime's resources."""

    def abort(self) -> None:  # noqa: B027 - a runtime inside this process cannot be stopped from outside
        """Stop at once whatever this instance runs outside the server's process (a python model's stub).

        Called when the server may wait no longer (its shutdown grace is over, or a second signal came), possibly
        from a signal handler: it must not block. A batch it interrupts fails; `unload` still follows.
        """

    def report_failure(self, reason: str) -> None:
        """This instance can serve no more (from any thread): its version turns UNAVAILABLE with `reason` until it
        is loaded again (engine.serving.lifecycle). A failure of one batch is that batch's error, not this."""
        if self.context.on_failure is not None:
            self.context.on_failure(InstanceFailure(self.context.instance_name, reason))

    def require_model_file(self) -> Path:
        """The model file, or a LoadError naming the path that is missing."""
        if not self.model_path.is_file():
            shown = f"{self.version_path.parent.name}/{self.version_path.name}/{self.model_path.name}"
            raise LoadError(f"model file '{shown}' not found")
        return self.model_path

    def prepare_requests(self, requests: list[InferenceRequest]) -> Any:
        """The batch `execute` takes from whole requests; tensor backends need only their inputs."""
        return self.prepare([request.inputs for request in requests])

    def prepare(self, requests: list[dict[str, np.ndarray]]) -> Any:
        """Concatenate each input along the batch dimension (one request passes through untouched)."""
        if len(requests) == 1:
            return requests[0]
        return {name: np.concatenate([r[name] for r in requests]) for name in requests[0]}

    def split(self, outputs: dict[str, np.ndarray], batch_sizes: list[int]) -> list[dict[str, np.ndarray]]:
        """Slice batched outputs back into one dict per request."""
        if len(batch_sizes) == 1:
            return [outputs]
        results: list[dict[str, np.ndarray]] = [{} for _ in batch_sizes]
        for name, array in outputs.items():
            start = 0
            for i, size in enumerate(batch_sizes):
                results[i][name] = array[start : start + size]
                start += size
            if start != array.shape[0]:
                raise ValueError(f"output '{name}' has batch {array.shape[0]}, the batch held {start}")
        return results

    @classmethod
    def code_in(cls, config: ModelConfig) -> str | None:
        """Why loading a version with this config runs code in the loading process, or None when it only reads data.

        Asked once per load by engine.serving.admission, on the resolved config, before any file of the version is
        opened.
        """
        return None

    @classmethod
    def autocomplete(cls, config: ModelConfig, version_path: Path) -> ModelConfig:
        """Fill what the config leaves out from the model file, where the runtime can tell."""
        return config
