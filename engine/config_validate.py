"""Check a ModelConfig before a model loads; each error names the model and the field at fault."""

from __future__ import annotations

import math

from engine.config import InstanceGroup, ModelConfig, ModelWarmup, TensorConfig
from engine.datatypes import WIRE_TYPES, wire_to_config
from engine.errors import InvalidArgument
from engine.names import check_model_name

DATA_TYPES: frozenset[str] = frozenset(wire_to_config(wire) for wire in WIRE_TYPES)
INSTANCE_KINDS = ("KIND_AUTO", "KIND_CPU", "KIND_GPU", "KIND_MODEL")
TIMEOUT_ACTIONS = ("REJECT", "DELAY")
VERSION_POLICY_KINDS = ("latest", "all", "specific")
SEQUENCE_STRATEGIES = ("direct", "oldest")
WILDCARD_DIM = -1


def validate_config(config: ModelConfig) -> None:
    """Raise InvalidArgument on the first problem found, e.g. "model 'm': input 'X': dims must be ..."."""
    check_model_name(config.name)
    check_model_filename(config)
    prefix = f"model '{config.name}'"
    if config.max_batch_size < 0:
        raise InvalidArgument(f"{prefix}: max_batch_size must be 0 or more, got {config.max_batch_size}")
    _check_tensors(prefix, "input", config.input, config.max_batch_size)
    _check_tensors(prefix, "output", config.output, config.max_batch_size)
    for index, group in enumerate(config.instance_group):
        _check_instance_group(prefix, index, group)
    schedulers = [
        name
        for name in ("dynamic_batching", "sequence_batching", "ensemble_scheduling")
        if getattr(config, name) is not None
    ]
    if len(schedulers) > 1:
        raise InvalidArgument(f"{prefix}: only one of {', '.join(schedulers)} may be set")
    _check_dynamic_batching(prefix, config)
    if config.sequence_batching is not None and config.sequence_batching.strategy not in SEQUENCE_STRATEGIES:
        raise InvalidArgument(
            f"{prefix}: sequence_batching: unknown strategy '{config.sequence_batching.strategy}' "
            f"(expected {' or '.join(SEQUENCE_STRATEGIES)})"
        )
    _check_version_policy(prefix, config)
    for warmup in config.model_warmup:
        _check_warmup(prefix, warmup, config)


def check_model_filename(config: ModelConfig) -> None:
    """default_model_filename names a file inside the version folder: one plain name, never a path."""
    filename = config.default_model_filename
    if not filename:
        return
    if "/" in filename or "\\" in filename or filename in (".", "..") or "\0" in filename:
        raise InvalidArgument(
            f"model '{config.name}': default_model_filename '{filename}' must be a file name inside the version "
            "folder, not a path"
        )


def _check_tensors(prefix: str, role: str, tensors: list[TensorConfig], max_batch_size: int) -> None:
    seen: set[str] = set()
    for index, tensor in enumerate(tensors):
        if not tensor.name:
            raise InvalidArgument(f"{prefix}: {role} {index} must specify 'name'")
        if tensor.name in seen:
            raise InvalidArgument(f"{prefix}: {role} '{tensor.name}' is declared more than once")
        seen.add(tensor.name)
        where = f"{prefix}: {role} '{tensor.name}'"
        if tensor.data_type in ("", "TYPE_INVALID"):
            raise InvalidArgument(f"{where}: must specify 'data_type'")
        if tensor.data_type not in DATA_TYPES:
            known = ", ".join(sorted(DATA_TYPES))
            raise InvalidArgument(f"{where}: unknown data_type '{tensor.data_type}' (expected one of {known})")
        # dims [] with batching is one scalar per batch item (shape [-1]); without batching it is a scalar,
        # which Triton does not serve
        if not tensor.dims and max_batch_size == 0:
            raise InvalidArgument(f"{where}: must specify 'dims' (a model without batching has no scalar tensors)")
        if any(dim < 1 and dim != WILDCARD_DIM for dim in tensor.dims):
            raise InvalidArgument(f"{where}: dims must be positive or -1, got {tensor.dims}")
        if tensor.reshape is not None:
            _check_reshape(where, tensor, max_batch_size)


def _check_reshape(where: str, tensor: TensorConfig, max_batch_size: int) -> None:
    """`reshape` must hold the same elements as `dims`, segment by segment between variable dims."""
    reshape = tensor.reshape or []
    if not reshape and max_batch_size == 0:
        raise InvalidArgument(f"{where}: reshape cannot be empty for a model without batching (max_batch_size 0)")
    if any(dim < 1 and dim != WILDCARD_DIM for dim in reshape):
        raise InvalidArgument(f"{where}: reshape must be positive or -1, got {reshape}")
    if not reshape:
        if math.prod(tensor.dims) != 1:
            raise InvalidArgument(f"{where}: an empty reshape needs dims with one element, got {tensor.dims}")
        return
    dims_segments, reshape_segments = _segments(tensor.dims), _segments(reshape)
    if len(dims_segments) != len(reshape_segments):
        raise InvalidArgument(
            f"{where}: dims {tensor.dims} and reshape {reshape} have different numbers of -1 dimensions"
        )
    if dims_segments != reshape_segments:
        raise InvalidArgument(f"{where}: reshape {reshape} does not hold the same elements as dims {tensor.dims}")


def _segments(shape: list[int]) -> list[int]:
    """Element counts of the runs of fixed dims between -1s: [2, 4, -1, 6] -> [8, 6]."""
    counts, current = [], 1
    for dim in shape:
        if dim == WILDCARD_DIM:
            counts.append(current)
            current = 1
        else:
            current *= dim
    counts.append(current)
    return counts


def _check_instance_group(prefix: str, index: int, group: InstanceGroup) -> None:
    where = f"{prefix}: instance_group {group.name or index}"
    if group.kind not in INSTANCE_KINDS:
        raise InvalidArgument(f"{where}: unknown kind '{group.kind}' (expected one of {', '.join(INSTANCE_KINDS)})")
    if group.count < 1:
        raise InvalidArgument(f"{where}: count must be 1 or more, got {group.count}")
    if any(gpu < 0 for gpu in group.gpus):
        raise InvalidArgument(f"{where}: gpus must be GPU indexes (0 or more), got {group.gpus}")
    if group.gpus and group.kind in ("KIND_CPU", "KIND_MODEL"):
        raise InvalidArgument(f"{where}: kind {group.kind} cannot list gpus {group.gpus}")


def _check_dynamic_batching(prefix: str, config: ModelConfig) -> None:
    batching = config.dynamic_batching
    if batching is None:
        return
    where = f"{prefix}: dynamic_batching"
    if config.max_batch_size == 0:
        raise InvalidArgument(f"{where}: needs max_batch_size > 0 (the model does not batch)")
    for size in batching.preferred_batch_size:
        if not 1 <= size <= config.max_batch_size:
            raise InvalidArgument(
                f"{where}: preferred_batch_size {size} must be between 1 and max_batch_size {config.max_batch_size}"
            )
    if batching.max_queue_delay_microseconds < 0:
        raise InvalidArgument(f"{where}: max_queue_delay_microseconds must be 0 or more")
    levels = batching.priority_levels
    if levels < 0:
        raise InvalidArgument(f"{where}: priority_levels must be 0 or more, got {levels}")
    if levels and not 1 <= batching.default_priority_level <= levels:
        raise InvalidArgument(
            f"{where}: default_priority_level must be between 1 and priority_levels {levels}, "
            f"got {batching.default_priority_level}"
        )
    if not levels and batching.default_priority_level:
        raise InvalidArgument(f"{where}: default_priority_level is set but priority_levels is 0")
    policies = {"default_queue_policy": batching.default_queue_policy}
    for level, policy in batching.priority_queue_policy.items():
        if not 1 <= level <= levels:
            raise InvalidArgument(
                f"{where}: priority_queue_policy key {level} must be between 1 and priority_levels {levels}"
            )
        policies[f"priority_queue_policy {level}"] = policy
    for name, policy in policies.items():
        if policy.timeout_action not in TIMEOUT_ACTIONS:
            raise InvalidArgument(
                f"{where}: {name}: unknown timeout_action '{policy.timeout_action}' "
                f"(expected {' or '.join(TIMEOUT_ACTIONS)})"
            )
        if policy.max_queue_size < 0 or policy.default_timeout_microseconds < 0:
            raise InvalidArgument(f"{where}: {name}: max_queue_size and default_timeout_microseconds must be >= 0")


def _check_version_policy(prefix: str, config: ModelConfig) -> None:
    policy = config.version_policy
    where = f"{prefix}: version_policy"
    if policy.kind not in VERSION_POLICY_KINDS:
        raise InvalidArgument(f"{where}: unknown kind '{policy.kind}' (expected latest, all or specific)")
    if policy.kind == "latest" and policy.num_versions < 1:
        raise InvalidArgument(f"{where}: latest num_versions must be 1 or more, got {policy.num_versions}")
    if policy.kind == "specific":
        if not policy.versions:
            raise InvalidArgument(f"{where}: specific must list at least one version")
        if any(version < 1 for version in policy.versions):
            raise InvalidArgument(f"{where}: specific versions must be 1 or more, got {policy.versions}")


def _check_warmup(prefix: str, warmup: ModelWarmup, config: ModelConfig) -> None:
    if not warmup.name:
        raise InvalidArgument(f"{prefix}: model_warmup must specify 'name'")
    where = f"{prefix}: model_warmup '{warmup.name}'"
    largest = max(config.max_batch_size, 1)
    if not 1 <= warmup.batch_size <= largest:
        raise InvalidArgument(f"{where}: batch_size must be between 1 and {largest}, got {warmup.batch_size}")
    if warmup.count < 1:
        raise InvalidArgument(f"{where}: count must be 1 or more, got {warmup.count}")
    if not warmup.inputs:
        raise InvalidArgument(f"{where}: must specify 'inputs'")
    for name, sample in warmup.inputs.items():
        declared = config.input_named(name)
        if declared is None:
            known = ", ".join(t.name for t in config.input) or "none"
            raise InvalidArgument(f"{where}: input '{name}' is not an input of the model (inputs: {known})")
        if sample.data_type != declared.data_type:
            raise InvalidArgument(
                f"{where}: input '{name}' has data_type {sample.data_type}, the model expects {declared.data_type}"
            )
        if any(dim < 1 for dim in sample.dims):
            raise InvalidArgument(f"{where}: input '{name}' dims must be concrete (1 or more), got {sample.dims}")
        sources = [sample.zero_data, sample.random_data, bool(sample.input_data_file)]
        if sum(sources) != 1:
            raise InvalidArgument(
                f"{where}: input '{name}' needs exactly one of zero_data, random_data, input_data_file"
            )
