"""Read and write Triton model configurations: config.pbtxt (protobuf text format) and the JSON form.

Parsing goes through the protobuf schema in `engine/proto/model_config.proto` (Triton's field names and
numbers), so every field a Triton repository may use is accepted and a typo is reported by name. The
result is the engine's `ModelConfig` dataclass; fields the dataclass has no place for are accepted and
dropped.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from google.protobuf.message import Message

from engine.config import (
    DynamicBatching,
    InstanceGroup,
    ModelConfig,
    ModelWarmup,
    QueuePolicy,
    SequenceBatching,
    TensorConfig,
    VersionPolicy,
    WarmupInput,
)
from engine.errors import InvalidArgument
from engine.proto import model_config_pb2 as pb

__all__ = [
    "CONFIG_FILES",
    "parse_config_pbtxt",
    "parse_config_json",
    "config_to_dict",
    "config_to_pbtxt",
    "merge_config",
    "read_config_file",
]

# the files a model folder may keep its config in
CONFIG_FILES = ("config.pbtxt", "config.json")

_PACKAGE_PREFIX = "infera.config."
# Triton treats these zeros as "not set" and runs with the value below
_SEQUENCE_IDLE_DEFAULT_US = SequenceBatching().max_sequence_idle_microseconds


def read_config_file(model_dir: Path) -> ModelConfig | None:
    """A model folder's config.pbtxt or config.json as written (not completed); None when it has neither."""
    name = Path(model_dir).name
    present = [file for file in CONFIG_FILES if (Path(model_dir) / file).is_file()]
    if not present:
        return None
    if len(present) > 1:
        raise InvalidArgument(f"model '{name}' has both config.pbtxt and config.json; keep one")
    source = f"{name}/{present[0]}"
    try:
        text = (Path(model_dir) / present[0]).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise InvalidArgument(f"{source}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    if present[0] == "config.json":
        return parse_config_json(text, source=source)
    return parse_config_pbtxt(text, source=source)


def parse_config_pbtxt(text: str, source: str = "config.pbtxt") -> ModelConfig:
    """Parse config.pbtxt text; errors name the file, the line and the field."""
    message = pb.ModelConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as error:
        raise InvalidArgument(_describe_text_error(error, text, source)) from None
    return _from_message(message)


def parse_config_json(data: dict[str, Any] | str | bytes, source: str = "config.json") -> ModelConfig:
    """Parse the JSON form (snake_case or lowerCamelCase names; 64-bit integers as numbers or strings)."""
    return _from_message(_message_from_json(data, source))


def config_to_dict(config: ModelConfig) -> dict[str, Any]:
    """The JSON Triton answers `GET /v2/models/<m>/config` with: every field, original names, numbers as numbers."""
    return json_format.MessageToDict(
        _to_message(config),
        always_print_fields_with_no_presence=True,
        preserving_proto_field_name=True,
        unquote_int64_if_possible=True,
    )


def config_to_pbtxt(config: ModelConfig) -> str:
    """config.pbtxt text for a config; `parse_config_pbtxt` reads it back to an equal config."""
    return text_format.MessageToString(_to_message(config), use_short_repeated_primitives=True)


def merge_config(base: ModelConfig, override: dict[str, Any], source: str = "config override") -> ModelConfig:
    """Apply a partial JSON config over `base`: each top-level field the override names replaces the base's."""
    if not isinstance(override, dict):
        raise InvalidArgument(f"{source}: expected a JSON object, got {type(override).__name__}")
    patch = _message_from_json(override, source)
    merged = _to_message(base)
    fields = pb.ModelConfig.DESCRIPTOR.fields_by_name
    by_json_name = {field.json_name: field for field in pb.ModelConfig.DESCRIPTOR.fields}
    for key in override:
        field = fields.get(key) or by_json_name[key]  # _message_from_json has rejected unknown keys
        merged.ClearField(field.name)
        if field.is_repeated:  # lists and maps
            getattr(merged, field.name).MergeFrom(getattr(patch, field.name))
        elif field.message_type is not None:
            if patch.HasField(field.name):
                getattr(merged, field.name).CopyFrom(getattr(patch, field.name))
        else:
            setattr(merged, field.name, getattr(patch, field.name))
    return _from_message(merged)


# --- parsing helpers -----------------------------------------------------------------------------------


def _message_from_json(data: dict[str, Any] | str | bytes, source: str) -> pb.ModelConfig:
    if isinstance(data, (str, bytes, bytearray)):
        try:
            data = json.loads(data)
        except ValueError as error:
            raise InvalidArgument(f"{source}: not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise InvalidArgument(f"{source}: expected a JSON object, got {type(data).__name__}")
    message = pb.ModelConfig()
    try:
        json_format.ParseDict(data, message)
    except json_format.ParseError as error:
        raise InvalidArgument(_describe_json_error(str(error), source)) from None
    return message


_UNKNOWN_FIELD = re.compile(r'Message type "([\w.]+)" has no field named "([^"]+)"(?: at "([^"]+)")?')
_ENUM_VALUE = re.compile(r'Enum type "([\w.]+)" has no value named (\w+)')
_REPEATED_SCALAR = re.compile(r'should not have multiple "(\w+)" fields')
_ONEOF = re.compile(r'Field "(\w+)" is specified along with field "(\w+)", another member of oneof')
_JSON_FIELD_PREFIX = re.compile(r"Failed to parse (\w+) field: ")
_JSON_AT_PATH = re.compile(r" at ([\w.\[\]]+?)\.*$")
_JSON_ENUM_VALUE = re.compile(r"Invalid enum value (\w+) for enum type ([\w.]+)")
_FIELD_BEFORE_VALUE = re.compile(r"([A-Za-z_]\w*)\s*:\s*(?:\[[^\]]*)?$")


def _describe_text_error(error: text_format.ParseError, text: str, source: str) -> str:
    """Rewrite protobuf's text-format error into 'file: line N: what, naming the field'."""
    line, column = error.GetLine(), error.GetColumn()
    # protobuf prefixes "L:C : " and often echoes the offending line in quotes; keep only the reason
    reason = re.sub(r"^\d+:\d+ : (?:'.*?': )?", "", str(error), flags=re.DOTALL)
    where = f"{source}: line {line}" if line else source
    if match := _UNKNOWN_FIELD.search(reason):
        return f"{where}: unknown field '{match.group(2)}' in {_short(match.group(1))}"
    if match := _REPEATED_SCALAR.search(reason):
        return f"{where}: field '{match.group(1)}' is set more than once"
    if match := _ONEOF.search(reason):
        return f"{where}: field '{match.group(1)}' cannot be set together with '{match.group(2)}'"
    field = _field_before(text, line, column)
    if match := _ENUM_VALUE.search(reason):
        options = ", ".join(_enum_names(match.group(1)))
        subject = f"field '{field}'" if field else _short(match.group(1))
        return f"{where}: {subject}: unknown value '{match.group(2)}' (expected one of {options})"
    reason = reason.replace(_PACKAGE_PREFIX, "").rstrip(".")
    return f"{where}: field '{field}': {reason}" if field else f"{where}: {reason}"


def _describe_json_error(message: str, source: str) -> str:
    """Rewrite protobuf's JSON error into 'file: path: what'."""
    if match := _UNKNOWN_FIELD.search(message):
        path = _short(match.group(3) or match.group(1))
        return f"{source}: unknown field '{match.group(2)}' in {path}"
    if "should not have multiple" in message and "oneof" in message:
        return f"{source}: only one of dynamic_batching, sequence_batching, ensemble_scheduling may be set"
    # protobuf nests "Failed to parse <field> field: " per level and sometimes ends with " at <path>"
    message = message.replace(_PACKAGE_PREFIX, "")
    fields = _JSON_FIELD_PREFIX.findall(message)
    reason = _JSON_FIELD_PREFIX.sub("", message)
    path = ".".join(["ModelConfig", *fields])
    if match := _JSON_AT_PATH.search(reason):
        reason, path = reason[: match.start()], match.group(1)
    reason = reason.strip().rstrip(".")
    if match := _JSON_ENUM_VALUE.search(reason):
        options = ", ".join(_enum_names(match.group(2)))
        reason = f"unknown value '{match.group(1)}' (expected one of {options})"
    return f"{source}: {path}: {reason}"


def _field_before(text: str, line: int, column: int) -> str:
    """The field name written just before the value at (line, column), when one can be seen."""
    lines = text.splitlines()
    if not (0 < line <= len(lines)):
        return ""
    match = _FIELD_BEFORE_VALUE.search(lines[line - 1][: max(column - 1, 0)])
    return match.group(1) if match else ""


def _short(type_name: str) -> str:
    return type_name.removeprefix(_PACKAGE_PREFIX)


def _enum_names(type_name: str) -> list[str]:
    enum = pb.DESCRIPTOR.pool.FindEnumTypeByName(_PACKAGE_PREFIX + _short(type_name))
    return [value.name for value in enum.values if not value.name.endswith("_INVALID")]


# --- message <-> dataclass -----------------------------------------------------------------------------


def _from_message(message: pb.ModelConfig) -> ModelConfig:
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
            )
            for group in message.instance_group
        ],
        dynamic_batching=_dynamic_batching_from(message.dynamic_batching)
        if message.HasField("dynamic_batching")
        else None,
        sequence_batching=SequenceBatching(
            max_sequence_idle_microseconds=message.sequence_batching.max_sequence_idle_microseconds
            or _SEQUENCE_IDLE_DEFAULT_US,
            strategy=message.sequence_batching.WhichOneof("strategy_choice") or "direct",
        )
        if message.HasField("sequence_batching")
        else None,
        ensemble_scheduling=_to_json(message.ensemble_scheduling) if message.HasField("ensemble_scheduling") else None,
        version_policy=_version_policy_from(message.version_policy),
        model_warmup=[_warmup_from(w) for w in message.model_warmup],
        parameters={key: value.string_value for key, value in message.parameters.items()},
        default_model_filename=message.default_model_filename,
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


def _to_message(config: ModelConfig) -> pb.ModelConfig:
    """The protobuf message for a dataclass config; a value the schema cannot hold is an InvalidArgument."""
    try:
        return _build_message(config)
    except (ValueError, TypeError, json_format.ParseError) as error:
        raise InvalidArgument(f"model '{config.name}': {str(error).replace(_PACKAGE_PREFIX, '')}") from None


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
        sequence = message.sequence_batching
        sequence.max_sequence_idle_microseconds = config.sequence_batching.max_sequence_idle_microseconds
        if config.sequence_batching.strategy not in ("direct", "oldest"):
            raise ValueError(f"sequence_batching: unknown strategy '{config.sequence_batching.strategy}'")
        getattr(sequence, config.sequence_batching.strategy).SetInParent()
    if config.ensemble_scheduling is not None:
        json_format.ParseDict(copy.deepcopy(config.ensemble_scheduling), message.ensemble_scheduling)
    _fill_version_policy(message.version_policy, config.version_policy)
    for warmup in config.model_warmup:
        _fill_warmup(message.model_warmup.add(), warmup)
    for key, value in config.parameters.items():
        message.parameters[key].string_value = value
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
