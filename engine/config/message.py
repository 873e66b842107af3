"""The engine's ModelConfig dataclasses to and from the protobuf ModelConfig message.

Reading fills in Triton's meaning of unset fields (count 0 is 1, an idle time of 0 is the default); writing
reports a value the schema cannot hold (an unknown data type, a negative count) as an InvalidArgument that names
the model and the field.
"""

from __future__ import annotations

import copy
import struct
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from engine.config.model_config import (
    DynamicBatching,
    InitialState,
    InstanceGroup,
    ModelConfig,
    ModelWarmup,
    QueuePolicy,
    SequenceBatching,
    SequenceControl,
    SequenceControlInput,
    SequenceState,
    TensorConfig,
    VersionPolicy,
    WarmupInput,
)
from engine.errors import InvalidArgument
from engine.proto import model_config_pb2 as pb

# the protobuf package, which messages and errors name and users never see
PACKAGE_PREFIX = "infera.config."
# Triton treats these zeros as "not set" and runs with the value below
_SEQUENCE_IDLE_DEFAULT_US = SequenceBatching().max_sequence_idle_microseconds


def from_message(message: pb.ModelConfig) -> ModelConfig:
    """The dataclass for a parsed message, with Triton's meaning of unset fields filled in."""
    return ModelConfig(
        name=message.name,
        platform=message.platform,
        backend=message.backend,
        max_batch_size=message.max_batch_size,
        input=[_tensor_from(t, optional=t.optional) for t in message.input],
        output=[_tensor_from(t, optional=False) for t in message.output],
        instance_group=[
            InstanceGroup(
                name=group.name,
                count=group.count or 1,
                kind=pb.ModelInstanceGroup.Kind.Name(group.kind),
                gpus=list(group.gpus),
                count_given=group.count > 0,
            )
            for group in message.instance_group
        ],
        dynamic_batching=_dynamic_batching_from(message.dynamic_batching)
        if message.HasField("dynamic_batching")
        else None,
        sequence_batching=_sequence_batching_from(message.sequence_batching)
        if message.HasField("sequence_batching")
        else None,
        ensemble_scheduling=_to_json(message.ensemble_scheduling) if message.HasField("ensemble_scheduling") else None,
        version_policy=_version_policy_from(message.version_policy),
        model_warmup=[_warmup_from(w) for w in message.model_warmup],
        parameters={key: value.string_value for key, value in message.parameters.items()},
        default_model_filename=message.default_model_filename,
        decoupled=message.model_transaction_policy.decoupled,
    )


def _tensor_from(tensor: pb.ModelInput | pb.ModelOutput, optional: bool) -> TensorConfig:
    return TensorConfig(
        name=tensor.name,
        data_type=pb.DataType.Name(tensor.data_type),
        dims=list(tensor.dims),
        reshape=list(tensor.reshape.shape) if tensor.HasField("reshape") else None,
        optional=optional,
    )


def _queue_policy_from(policy: pb.ModelQueuePolicy) -> QueuePolicy:
    return QueuePolicy(
        timeout_action=pb.ModelQueuePolicy.TimeoutAction.Name(policy.timeout_action),
        default_timeout_microseconds=policy.default_timeout_microseconds,
        allow_timeout_override=policy.allow_timeout_override,
        max_queue_size=policy.max_queue_size,
    )


def _dynamic_batching_from(batching: pb.ModelDynamicBatching) -> DynamicBatching:
    return DynamicBatching(
        preferred_batch_size=list(batching.preferred_batch_size),
        max_queue_delay_microseconds=batching.max_queue_delay_microseconds,
        preserve_ordering=batching.preserve_ordering,
        priority_levels=batching.priority_levels,
        default_priority_level=batching.default_priority_level,
        default_queue_policy=_queue_policy_from(batching.default_queue_policy),
        priority_queue_policy={
            int(level): _queue_policy_from(policy) for level, policy in sorted(batching.priority_queue_policy.items())
        },
    )


def _sequence_batching_from(batching: pb.ModelSequenceBatching) -> SequenceBatching:
    strategy = batching.WhichOneof("strategy_choice") or "direct"
    direct, oldest = batching.direct, batching.oldest  # the unset one reads as all defaults
    return SequenceBatching(
        max_sequence_idle_microseconds=batching.max_sequence_idle_microseconds or _SEQUENCE_IDLE_DEFAULT_US,
        strategy=strategy,
        control_input=[
            SequenceControlInput(name=control_input.name, control=[_control_from(c) for c in control_input.control])
            for control_input in batching.control_input
        ],
        state=[_state_from(state) for state in batching.state],
        max_queue_delay_microseconds=(oldest if strategy == "oldest" else direct).max_queue_delay_microseconds,
        minimum_slot_utilization=_float32_value(direct.minimum_slot_utilization),
        max_candidate_sequences=oldest.max_candidate_sequences,
        preferred_batch_size=list(oldest.preferred_batch_size),
        preserve_ordering=oldest.preserve_ordering,
    )


def _control_from(control: pb.ModelSequenceBatching.Control) -> SequenceControl:
    return SequenceControl(
        kind=pb.ModelSequenceBatching.Control.Kind.Name(control.kind),
        int32_false_true=list(control.int32_false_true),
        fp32_false_true=[_float32_value(value) for value in control.fp32_false_true],
        bool_false_true=list(control.bool_false_true),
        data_type=pb.DataType.Name(control.data_type) if control.data_type else "",
    )


def _state_from(state: pb.ModelSequenceBatching.State) -> SequenceState:
    return SequenceState(
        input_name=state.input_name,
        output_name=state.output_name,
        data_type=pb.DataType.Name(state.data_type),
        dims=list(state.dims),
        initial_state=[
            InitialState(
                data_type=pb.DataType.Name(initial.data_type),
                dims=list(initial.dims),
                # Triton starts from zeros whenever zero_data is present, even as `zero_data: false`
                zero_data=initial.WhichOneof("state_data") == "zero_data",
                data_file=initial.data_file,
                name=initial.name,
            )
            for initial in state.initial_state
        ],
    )


def _float32_value(value: float) -> float:
    """A protobuf `float` as the shortest decimal that is the same float32: 0.1, not 0.10000000149011612.

    Writing it back gives the same float32, so a config read and written is unchanged, and one built in code
    with 0.1 equals itself read back.
    """
    for digits in range(6, 10):  # 9 significant digits always identify a float32
        shortest = float(f"{value:.{digits}g}")
        if struct.unpack("f", struct.pack("f", shortest))[0] == value:
            return shortest
    return value  # nan


def _version_policy_from(policy: pb.ModelVersionPolicy) -> VersionPolicy:
    kind = policy.WhichOneof("policy_choice")
    if kind == "all":
        return VersionPolicy(kind="all")
    if kind == "specific":
        return VersionPolicy(kind="specific", versions=list(policy.specific.versions))
    if kind == "latest":
        return VersionPolicy(kind="latest", num_versions=policy.latest.num_versions)
    return VersionPolicy()  # Triton's default: the latest version only


def _warmup_from(warmup: pb.ModelWarmup) -> ModelWarmup:
    return ModelWarmup(
        name=warmup.name,
        batch_size=warmup.batch_size or 1,
        inputs={
            name: WarmupInput(
                data_type=pb.DataType.Name(sample.data_type),
                dims=list(sample.dims),
                zero_data=sample.zero_data,
                random_data=sample.random_data,
                input_data_file=sample.input_data_file,
            )
            for name, sample in sorted(warmup.inputs.items())
        },
        count=warmup.count or 1,
    )


def _to_json(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True, unquote_int64_if_possible=True)


def to_message(config: ModelConfig) -> pb.ModelConfig:
    """The protobuf message for a dataclass config; a value the schema cannot hold is an InvalidArgument."""
    try:
        return _build_message(config)
    except (ValueError, TypeError, json_format.ParseError) as error:
        raise InvalidArgument(f"model '{config.name}': {str(error).replace(PACKAGE_PREFIX, '')}") from None


def _build_message(config: ModelConfig) -> pb.ModelConfig:
    message = pb.ModelConfig(
        name=config.name,
        platform=config.platform,
        backend=config.backend,
        max_batch_size=config.max_batch_size,
        default_model_filename=config.default_model_filename,
    )
    for tensor in config.input:
        _fill_tensor(message.input.add(optional=tensor.optional), tensor, "input")
    for tensor in config.output:
        _fill_tensor(message.output.add(), tensor, "output")
    for group in config.instance_group:
        message.instance_group.add(
            name=group.name,
            count=group.count,
            kind=_enum_value(pb.ModelInstanceGroup.Kind, group.kind, "instance_group: kind"),
            gpus=group.gpus,
        )
    if config.dynamic_batching is not None:
        _fill_dynamic_batching(message.dynamic_batching, config.dynamic_batching)
    if config.sequence_batching is not None:
        _fill_sequence_batching(message.sequence_batching, config.sequence_batching)
    if config.ensemble_scheduling is not None:
        json_format.ParseDict(copy.deepcopy(config.ensemble_scheduling), message.ensemble_scheduling)
    _fill_version_policy(message.version_policy, config.version_policy)
    for warmup in config.model_warmup:
        _fill_warmup(message.model_warmup.add(), warmup)
    for key, value in config.parameters.items():
        message.parameters[key].string_value = value
    if config.decoupled:
        message.model_transaction_policy.decoupled = True
    return message


def _enum_value(enum: Any, name: str, subject: str) -> int:
    """The number of an enum value by name (TYPE_FP32, KIND_GPU), naming the field when the name is unknown."""
    try:
        return enum.Value(name)
    except ValueError:
        options = ", ".join(enum.keys())
        raise ValueError(f"{subject}: unknown value '{name}' (expected one of {options})") from None


def _fill_tensor(target: pb.ModelInput | pb.ModelOutput, tensor: TensorConfig, role: str) -> None:
    target.name = tensor.name
    target.data_type = _enum_value(pb.DataType, tensor.data_type, f"{role} '{tensor.name}': data_type")
    target.dims.extend(tensor.dims)
    if tensor.reshape is not None:
        target.reshape.SetInParent()  # an empty reshape (a scalar) is meaningful, so mark it present
        target.reshape.shape.extend(tensor.reshape)


def _fill_queue_policy(target: pb.ModelQueuePolicy, policy: QueuePolicy) -> None:
    target.timeout_action = _enum_value(pb.ModelQueuePolicy.TimeoutAction, policy.timeout_action, "timeout_action")
    target.default_timeout_microseconds = policy.default_timeout_microseconds
    target.allow_timeout_override = policy.allow_timeout_override
    target.max_queue_size = policy.max_queue_size


def _fill_dynamic_batching(target: pb.ModelDynamicBatching, batching: DynamicBatching) -> None:
    target.SetInParent()
    target.preferred_batch_size.extend(batching.preferred_batch_size)
    target.max_queue_delay_microseconds = batching.max_queue_delay_microseconds
    target.preserve_ordering = batching.preserve_ordering
    target.priority_levels = batching.priority_levels
    target.default_priority_level = batching.default_priority_level
    _fill_queue_policy(target.default_queue_policy, batching.default_queue_policy)
    for level, policy in batching.priority_queue_policy.items():
        _fill_queue_policy(target.priority_queue_policy[level], policy)


def _fill_sequence_batching(target: pb.ModelSequenceBatching, batching: SequenceBatching) -> None:
    target.SetInParent()
    target.max_sequence_idle_microseconds = batching.max_sequence_idle_microseconds
    for control_input in batching.control_input:
        entry = target.control_input.add(name=control_input.name)
        where = f"sequence_batching: control_input '{control_input.name}'"
        for control in control_input.control:
            entry.control.add(
                kind=_enum_value(pb.ModelSequenceBatching.Control.Kind, control.kind, f"{where}: kind"),
                int32_false_true=control.int32_false_true,
                fp32_false_true=control.fp32_false_true,
                bool_false_true=control.bool_false_true,
                data_type=_enum_value(pb.DataType, control.data_type, f"{where}: data_type")
                if control.data_type
                else 0,
            )
    for state in batching.state:
        where = f"sequence_batching: state '{state.input_name}'"
        entry = target.state.add(
            input_name=state.input_name,
            output_name=state.output_name,
            data_type=_enum_value(pb.DataType, state.data_type, f"{where}: data_type"),
            dims=state.dims,
        )
        for initial in state.initial_state:
            written = entry.initial_state.add(
                data_type=_enum_value(pb.DataType, initial.data_type, f"{where}: initial_state: data_type"),
                dims=initial.dims,
                name=initial.name,
            )
            if initial.data_file:
                written.data_file = initial.data_file
            elif initial.zero_data:
                written.zero_data = True
    if batching.strategy == "direct":
        target.direct.max_queue_delay_microseconds = batching.max_queue_delay_microseconds
        target.direct.minimum_slot_utilization = batching.minimum_slot_utilization
    elif batching.strategy == "oldest":
        target.oldest.max_candidate_sequences = batching.max_candidate_sequences
        target.oldest.preferred_batch_size.extend(batching.preferred_batch_size)
        target.oldest.max_queue_delay_microseconds = batching.max_queue_delay_microseconds
        target.oldest.preserve_ordering = batching.preserve_ordering
    else:
        raise ValueError(f"sequence_batching: unknown strategy '{batching.strategy}' (expected direct or oldest)")
    getattr(target, batching.strategy).SetInParent()  # `direct { }` with every field at its default


def _fill_version_policy(target: pb.ModelVersionPolicy, policy: VersionPolicy) -> None:
    if policy.kind == "latest":
        target.latest.num_versions = policy.num_versions
    elif policy.kind == "all":
        target.all.SetInParent()
    elif policy.kind == "specific":
        target.specific.SetInParent()
        target.specific.versions.extend(policy.versions)
    else:
        raise ValueError(f"version_policy: unknown kind '{policy.kind}' (expected latest, all or specific)")


def _fill_warmup(target: pb.ModelWarmup, warmup: ModelWarmup) -> None:
    target.name = warmup.name
    target.batch_size = warmup.batch_size
    target.count = warmup.count
    for name, sample in warmup.inputs.items():
        entry = target.inputs[name]
        entry.data_type = _enum_value(
            pb.DataType, sample.data_type, f"model_warmup '{warmup.name}': input '{name}': data_type"
        )
        entry.dims.extend(sample.dims)
        if sample.input_data_file:
            entry.input_data_file = sample.input_data_file
        elif sample.random_data:
            entry.random_data = True
        elif sample.zero_data:
            entry.zero_data = True
