"""Triton's model configuration (ModelConfig) as plain dataclasses, with the backend each config names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.config.datatypes import config_to_wire

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
    # False when the config left `count` out: a CPU group of some backends then gets Triton's default of 2
    count_given: bool = field(default=True, compare=False, repr=False)


# Triton's default `count` of a CPU instance group that names none, and the backends that take it (its
# SetDefaultInstanceCount: runtimes that scale with instances; pytorch and python keep one)
DEFAULT_CPU_INSTANCE_COUNT = 2
DEFAULT_CPU_INSTANCE_BACKENDS = frozenset({"onnxruntime", "tensorflow"})


def cpu_instance_count(group: InstanceGroup, backend_name: str) -> int:
    """How many instances a group that runs on the CPU creates: its `count`, or Triton's default when unset."""
    if not group.count_given and backend_name in DEFAULT_CPU_INSTANCE_BACKENDS:
        return DEFAULT_CPU_INSTANCE_COUNT
    return group.count


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
class SequenceControl:
    """One control of a `control_input`: which signal (START, END, READY, CORRID) and its false/true values."""

    kind: str  # CONTROL_SEQUENCE_START, _END, _READY or _CORRID
    int32_false_true: list[int] = field(default_factory=list)
    fp32_false_true: list[float] = field(default_factory=list)
    bool_false_true: list[bool] = field(default_factory=list)
    data_type: str = ""  # CORRID only: TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING

    @property
    def tensor_data_type(self) -> str:
        """The type of the tensor this control fills: CORRID's `data_type`, else that of its false/true list."""
        if self.kind == "CONTROL_SEQUENCE_CORRID":
            return self.data_type
        for values, data_type in (
            (self.int32_false_true, "TYPE_INT32"),
            (self.fp32_false_true, "TYPE_FP32"),
            (self.bool_false_true, "TYPE_BOOL"),
        ):
            if values:
                return data_type
        return ""


@dataclass
class SequenceControlInput:
    """A model input the server fills for sequence requests (the client never sends it)."""

    name: str
    control: list[SequenceControl] = field(default_factory=list)


@dataclass
class InitialState:
    """What a sequence's implicit state holds at START: zeros, or the contents of a file in the model folder."""

    data_type: str
    dims: list[int]
    zero_data: bool = False
    data_file: str = ""
    name: str = ""


@dataclass
class SequenceState:
    """Implicit state: the model's output `output_name` comes back as its input `input_name` on the next request."""

    input_name: str
    output_name: str
    data_type: str
    dims: list[int]
    initial_state: list[InitialState] = field(default_factory=list)


@dataclass
class SequenceBatching:
    """`sequence_batching`: requests of one correlation id go to one instance, in order, with control tensors.

    `strategy` is "direct" (each sequence owns a batch slot) or "oldest" (sequences batched oldest first);
    `max_queue_delay_microseconds` belongs to the strategy; `minimum_slot_utilization` to direct only,
    `max_candidate_sequences`, `preferred_batch_size` and `preserve_ordering` to oldest only.
    """

    max_sequence_idle_microseconds: int = 1_000_000
    strategy: str = "direct"
    control_input: list[SequenceControlInput] = field(default_factory=list)
    state: list[SequenceState] = field(default_factory=list)
    max_queue_delay_microseconds: int = 0
    minimum_slot_utilization: float = 0.0
    max_candidate_sequences: int = 0
    preferred_batch_size: list[int] = field(default_factory=list)
    preserve_ordering: bool = False

    def control_names(self) -> set[str]:
        """Inputs the server fills: control inputs and implicit-state inputs."""
        return {c.name for c in self.control_input} | {s.input_name for s in self.state}


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
    decoupled: bool = False  # model_transaction_policy { decoupled: true }: 0..N responses per request

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
