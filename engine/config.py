"""Triton's model configuration (ModelConfig) as plain dataclasses, with the backend each config names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.datatypes import config_to_wire

# platform -> backend, as Triton resolves them
PLATFORM_BACKENDS = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "torch_export": "pytorch",
    "ensemble": "ensemble",
}
# backend -> the file a version folder holds when default_model_filename is empty
DEFAULT_MODEL_FILENAMES = {
    "onnxruntime": "model.onnx",
    "pytorch": "model.pt",
    "python": "model.py",
}


@dataclass
class TensorConfig:
    """One `input` or `output` entry: dims exclude the batch dimension when max_batch_size > 0."""

    name: str
    data_type: str
    dims: list[int]
    reshape: list[int] | None = None
    optional: bool = False

    @property
    def datatype(self) -> str:
        """The v2 wire name (FP32, BYTES, ...)."""
        return config_to_wire(self.data_type)


@dataclass
class InstanceGroup:
    """`instance_group`: how many instances of which kind, on which GPUs."""

    name: str = ""
    count: int = 1
    kind: str = "KIND_AUTO"
    gpus: list[int] = field(default_factory=list)


@dataclass
class QueuePolicy:
    """`default_queue_policy` / `priority_queue_policy`: bounds and timeouts of one priority queue."""

    timeout_action: str = "REJECT"
    default_timeout_microseconds: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0


@dataclass
class DynamicBatching:
    """`dynamic_batching`: how requests gather into batches."""

    preferred_batch_size: list[int] = field(default_factory=list)
    max_queue_delay_microseconds: int = 0
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy = field(default_factory=QueuePolicy)
    priority_queue_policy: dict[int, QueuePolicy] = field(default_factory=dict)


@dataclass
class SequenceBatching:
    """`sequence_batching`: requests of one correlation id go to one instance, in order."""

    max_sequence_idle_microseconds: int = 1_000_000
    strategy: str = "direct"


@dataclass
class VersionPolicy:
    """`version_policy`: latest N, all, or specific versions."""

    kind: str = "latest"
    num_versions: int = 1
    versions: list[int] = field(default_factory=list)


@dataclass
class WarmupInput:
    """One input of a warm-up sample: zeros, random data, or a file in the model's warmup folder."""

    data_type: str
    dims: list[int]
    zero_data: bool = False
    random_data: bool = False
    input_data_file: str = ""


@dataclass
class ModelWarmup:
    """`model_warmup`: a sample sent `count` times before a version takes traffic."""

    name: str
    batch_size: int = 1
    inputs: dict[str, WarmupInput] = field(default_factory=dict)
    count: int = 1


@dataclass
class ModelConfig:
    """Triton's ModelConfig message; `parameters` flattens {key: {string_value: v}} to {key: v}."""

    name: str
    platform: str = ""
    backend: str = ""
    max_batch_size: int = 0
    input: list[TensorConfig] = field(default_factory=list)
    output: list[TensorConfig] = field(default_factory=list)
    instance_group: list[InstanceGroup] = field(default_factory=list)
    dynamic_batching: DynamicBatching | None = None
    sequence_batching: SequenceBatching | None = None
    ensemble_scheduling: dict[str, Any] | None = None
    version_policy: VersionPolicy = field(default_factory=VersionPolicy)
    model_warmup: list[ModelWarmup] = field(default_factory=list)
    parameters: dict[str, str] = field(default_factory=dict)
    default_model_filename: str = ""

    @property
    def backend_name(self) -> str:
        """The backend that runs this model, from `backend` or else `platform`."""
        return self.backend or PLATFORM_BACKENDS.get(self.platform, "")

    @property
    def model_filename(self) -> str:
        """The file inside a version folder that holds the model."""
        if self.default_model_filename:
            return self.default_model_filename
        if self.platform == "torch_export":
            return "model.pt2"
        return DEFAULT_MODEL_FILENAMES.get(self.backend_name, "model")

    def input_named(self, name: str) -> TensorConfig | None:
        return next((t for t in self.input if t.name == name), None)

    def output_named(self, name: str) -> TensorConfig | None:
        return next((t for t in self.output if t.name == name), None)
