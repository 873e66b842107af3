"""Check a ModelConfig before a model loads; each error names the model and the field at fault."""

from __future__ import annotations

import math

from engine.config.datatypes import WIRE_TYPES, wire_to_config
from engine.config.model_config import (
    InitialState,
    InstanceGroup,
    ModelConfig,
    ModelWarmup,
    SequenceBatching,
    SequenceControl,
    SequenceState,
    TensorConfig,
)
from engine.config.names import check_model_name
from engine.errors import InvalidArgument

DATA_TYPES: frozenset[str] = frozenset(wire_to_config(wire) for wire in WIRE_TYPES)
INSTANCE_KINDS = ("KIND_AUTO", "KIND_CPU", "KIND_GPU", "KIND_MODEL")
TIMEOUT_ACTIONS = ("REJECT", "DELAY")
VERSION_POLICY_KINDS = ("latest", "all", "specific")
SEQUENCE_STRATEGIES = ("direct", "oldest")
CORRID = "CONTROL_SEQUENCE_CORRID"
SEQUENCE_CONTROL_KINDS = ("CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_END", "CONTROL_SEQUENCE_READY", CORRID)
CORRID_DATA_TYPES = ("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING")
FALSE_TRUE_FIELDS = ("int32_false_true", "fp32_false_true", "bool_false_true")
# SequenceBatching holds both strategies' settings flat; the other strategy's must stay at their defaults
STRATEGY_FIELDS = {
    "direct": ("minimum_slot_utilization",),
    "oldest": ("max_candidate_sequences", "preferred_batch_size", "preserve_ordering"),
}
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
    _check_sequence_batching(prefix, config)
    _check_version_policy(prefix, config)
    for warmup in config.model_warmup:
        _check_warmup(prefix, warmup, config)


def check_model_filename(config: ModelConfig) -> None:
    """default_model_filename names a file inside the version folder: one plain name, never a path."""
    filename = config.default_model_filename
    if filename and not _is_plain_file_name(filename):
        raise InvalidArgument(
            f"model '{config.name}': default_model_filename '{filename}' must be a file name inside the version "
            "folder, not a path"
        )


def _is_plain_file_name(name: str) -> bool:
    """One file name that stays in its folder: no separator, not `.` or `..`, no NUL."""
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..") and "\0" not in name


def _check_tensors(prefix: str, role: str, tensors: list[TensorConfig], max_batch_size: int) -> None:
    seen: set[str] = set()
    for index, tensor in enumerate(tensors):
        if not tensor.name:
            raise InvalidArgument(f"{prefix}: {role} {index} must specify 'name'")
        if tensor.name in seen:
            raise InvalidArgument(f"{prefix}: {role} '{tensor.name}' is declared more than once")
        seen.add(tensor.name)
        where = f"{prefix}: {role} '{tensor.name}'"
        _check_data_type(where, tensor.data_type)
        _check_dims(where, tensor.dims, max_batch_size)
        if tensor.reshape is not None:
            _check_reshape(where, tensor, max_batch_size)


def _check_data_type(where: str, data_type: str) -> None:
    if data_type in ("", "TYPE_INVALID"):
        raise InvalidArgument(f"{where}: must specify 'data_type'")
    if data_type not in DATA_TYPES:
        known = ", ".join(sorted(DATA_TYPES))
        raise InvalidArgument(f"{where}: unknown data_type '{data_type}' (expected one of {known})")


def _check_dims(where: str, dims: list[int], max_batch_size: int) -> None:
    # dims [] with batching is one scalar per batch item (shape [-1]); without batching it is a scalar,
    # which Triton does not serve
    if not dims and max_batch_size == 0:
        raise InvalidArgument(f"{where}: must specify 'dims' (a model without batching has no scalar tensors)")
    if any(dim < 1 and dim != WILDCARD_DIM for dim in dims):
        raise InvalidArgument(f"{where}: dims must be positive or -1, got {dims}")


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


def _check_sequence_batching(prefix: str, config: ModelConfig) -> None:
    """Triton's checks of controls, states and strategy, and that every input the server fills has its own name."""
    batching = config.sequence_batching
    if batching is None:
        return
    where = f"{prefix}: sequence_batching"
    _check_strategy(where, batching, config.max_batch_size)
    if batching.max_sequence_idle_microseconds < 0:
        raise InvalidArgument(f"{where}: max_sequence_idle_microseconds must be 0 or more")
    declared = {tensor.name for tensor in config.input}
    filled: set[str] = set()
    kinds: dict[str, str] = {}
    for index, control_input in enumerate(batching.control_input):
        if not control_input.name:
            raise InvalidArgument(f"{where}: control_input {index} must specify 'name'")
        subject = f"control_input '{control_input.name}'"
        _claim_input(where, subject, control_input.name, declared, filled)
        if len(control_input.control) != 1:
            raise InvalidArgument(
                f"{where}: {subject} must list exactly one control (its tensor carries one signal), "
                f"got {len(control_input.control)}"
            )
        control = control_input.control[0]
        _check_control(f"{where}: {subject}", control)
        if control.kind in kinds:
            raise InvalidArgument(
                f"{where}: {control.kind} is given by both control_input '{kinds[control.kind]}' and "
                f"'{control_input.name}'; a kind may appear once"
            )
        kinds[control.kind] = control_input.name
    outputs: set[str] = set()
    for index, state in enumerate(batching.state):
        _check_state(where, index, state, config.max_batch_size)
        _claim_input(where, f"state input_name '{state.input_name}'", state.input_name, declared, filled)
        if state.output_name in outputs:
            raise InvalidArgument(f"{where}: state output_name '{state.output_name}' is used by more than one state")
        outputs.add(state.output_name)


def _check_strategy(where: str, batching: SequenceBatching, max_batch_size: int) -> None:
    strategy = batching.strategy
    if strategy not in SEQUENCE_STRATEGIES:
        raise InvalidArgument(f"{where}: unknown strategy '{strategy}' (expected {' or '.join(SEQUENCE_STRATEGIES)})")
    defaults = SequenceBatching()
    for other, fields in STRATEGY_FIELDS.items():
        for name in fields:
            if other != strategy and getattr(batching, name) != getattr(defaults, name):
                raise InvalidArgument(f"{where}: {name} is a setting of the {other} strategy, not {strategy}")
    if batching.max_queue_delay_microseconds < 0:
        raise InvalidArgument(f"{where}: {strategy} max_queue_delay_microseconds must be 0 or more")
    if not 0.0 <= batching.minimum_slot_utilization <= 1.0:
        raise InvalidArgument(
            f"{where}: direct minimum_slot_utilization must be between 0 and 1, got {batching.minimum_slot_utilization}"
        )
    if batching.max_candidate_sequences < 0:
        raise InvalidArgument(
            f"{where}: oldest max_candidate_sequences must be 0 or more, got {batching.max_candidate_sequences}"
        )
    for size in batching.preferred_batch_size:
        if not 1 <= size <= max_batch_size:
            raise InvalidArgument(
                f"{where}: oldest preferred_batch_size {size} must be between 1 and max_batch_size {max_batch_size}"
            )


def _claim_input(where: str, subject: str, name: str, declared: set[str], filled: set[str]) -> None:
    """The server fills control and state inputs itself, so `input` must not list them and each has one filler."""
    if name in declared:
        raise InvalidArgument(f"{where}: {subject} is also listed in 'input'; the server fills it, remove it there")
    if name in filled:
        raise InvalidArgument(f"{where}: {subject} names an input another control_input or state already fills")
    filled.add(name)


def _check_control(where: str, control: SequenceControl) -> None:
    if control.kind not in SEQUENCE_CONTROL_KINDS:
        raise InvalidArgument(
            f"{where}: unknown kind '{control.kind}' (expected one of {', '.join(SEQUENCE_CONTROL_KINDS)})"
        )
    given = [name for name in FALSE_TRUE_FIELDS if getattr(control, name)]
    if control.kind == CORRID:
        if given:
            raise InvalidArgument(f"{where}: {CORRID} carries the sequence id and takes no {' or '.join(given)}")
        if control.data_type not in CORRID_DATA_TYPES:
            raise InvalidArgument(
                f"{where}: {CORRID} needs data_type {', '.join(CORRID_DATA_TYPES)}, got {control.data_type or 'none'}"
            )
        return
    if len(given) != 1:
        got = f", got {' and '.join(given)}" if given else ""
        raise InvalidArgument(f"{where}: {control.kind} needs exactly one of {', '.join(FALSE_TRUE_FIELDS)}{got}")
    values = getattr(control, given[0])
    if len(values) != 2:
        raise InvalidArgument(f"{where}: {control.kind}: {given[0]} must have 2 values (false, true), got {values}")


def _check_state(where: str, index: int, state: SequenceState, max_batch_size: int) -> None:
    for name in ("input_name", "output_name"):
        if not getattr(state, name):
            raise InvalidArgument(f"{where}: state {index} must specify '{name}'")
    subject = f"{where}: state '{state.input_name}'"
    _check_data_type(subject, state.data_type)
    _check_dims(subject, state.dims, max_batch_size)
    if len(state.initial_state) > 1:
        raise InvalidArgument(f"{subject}: initial_state may have one entry, got {len(state.initial_state)}")
    for initial in state.initial_state:
        _check_initial_state(subject, state, initial)


def _check_initial_state(subject: str, state: SequenceState, initial: InitialState) -> None:
    """Triton's rules; `data_file` is read from `<model>/initial_state/`, next to the version folders."""
    if not initial.name:
        raise InvalidArgument(f"{subject}: initial_state must specify 'name'")
    where = f"{subject}: initial_state '{initial.name}'"
    if initial.data_type != state.data_type:
        raise InvalidArgument(f"{where}: data_type {initial.data_type} must match the state's {state.data_type}")
    if len(initial.dims) != len(state.dims) or any(dim < 0 for dim in initial.dims):
        raise InvalidArgument(
            f"{where}: dims must be fixed (0 or more), one for each of the state's dims {state.dims}, "
            f"got {initial.dims}"
        )
    if any(want not in (WILDCARD_DIM, dim) for dim, want in zip(initial.dims, state.dims, strict=True)):
        raise InvalidArgument(f"{where}: dims {initial.dims} do not fit the state's dims {state.dims}")
    if initial.zero_data == bool(initial.data_file):
        raise InvalidArgument(f"{where}: needs exactly one of zero_data, data_file")
    if initial.data_file and not _is_plain_file_name(initial.data_file):
        raise InvalidArgument(
            f"{where}: data_file '{initial.data_file}' must be a file name inside the model's initial_state "
            "folder, not a path"
        )


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
