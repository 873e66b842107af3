"""Read and write Triton model configurations: config.pbtxt (protobuf text format) and the JSON form.

Parsing goes through the protobuf schema in `engine/proto/model_config.proto` (Triton's field names and
numbers), so every field a Triton repository may use is accepted and a typo is reported by name. The
result is the engine's `ModelConfig` dataclass (`engine/config/message.py` converts); fields the dataclass
has no place for are accepted and dropped.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
from google.protobuf import json_format, text_format

from engine.config.message import PACKAGE_PREFIX, from_message, to_message
from engine.config.model_config import ModelConfig
from engine.errors import InvalidArgument
from engine.proto import model_config_pb2 as pb

__all__ = [
    "CONFIG_FILES",
    "MAX_JSON_DEPTH",
    "check_json_depth",
    "load_json",
    "parse_config_pbtxt",
    "parse_config_json",
    "config_to_dict",
    "config_to_pbtxt",
    "merge_config",
    "read_config_file",
    "replacing_override",
]

# the files a model folder may keep its config in
CONFIG_FILES = ("config.pbtxt", "config.json")
# how deep a JSON document may nest: a ModelConfig nests 5 levels at most (model_warmup.input_data.dims); Python's
# parser recursed until RecursionError (a 500) on a document nested some thousand levels deep
MAX_JSON_DEPTH = 32


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
    return from_message(message)


def parse_config_json(data: dict[str, Any] | str | bytes, source: str = "config.json") -> ModelConfig:
    """Parse the JSON form (snake_case or lowerCamelCase names; 64-bit integers as numbers or strings)."""
    return from_message(_message_from_json(data, source))


def config_to_dict(config: ModelConfig) -> dict[str, Any]:
    """The JSON Triton answers `GET /v2/models/<m>/config` with: every field, original names, numbers as numbers."""
    return json_format.MessageToDict(
        to_message(config),
        always_print_fields_with_no_presence=True,
        preserving_proto_field_name=True,
        unquote_int64_if_possible=True,
    )


def config_to_pbtxt(config: ModelConfig) -> str:
    """config.pbtxt text for a config; `parse_config_pbtxt` reads it back to an equal config."""
    return text_format.MessageToString(to_message(config), use_short_repeated_primitives=True)


def merge_config(base: ModelConfig, override: dict[str, Any], source: str = "config override") -> ModelConfig:
    """Apply a partial JSON config over `base`: each top-level field the override names replaces the base's."""
    if not isinstance(override, dict):
        raise InvalidArgument(f"{source}: expected a JSON object, got {type(override).__name__}")
    patch = _message_from_json(override, source)
    merged = to_message(base)
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
    return from_message(merged)


def replacing_override(config: ModelConfig) -> dict[str, Any]:
    """An override (see merge_config) that turns any base into `config`: every top-level field, null where unset."""
    given = config_to_dict(config)
    return {field.name: given.get(field.name) for field in pb.ModelConfig.DESCRIPTOR.fields}


# --- parsing helpers -----------------------------------------------------------------------------------


def load_json(data: str | bytes | bytearray, source: str) -> Any:
    """A JSON document nested at most MAX_JSON_DEPTH levels deep; InvalidArgument naming the limit, or the error."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as error:
        if _bracket_depth(data) > MAX_JSON_DEPTH:  # orjson stops at its own limit of 1024 levels
            raise InvalidArgument(_too_deep(source)) from None
        raise InvalidArgument(f"{source}: not valid JSON: {error}") from None
    check_json_depth(value, source)
    return value


def check_json_depth(value: Any, source: str) -> None:
    """InvalidArgument when a parsed JSON value (objects and arrays) nests deeper than MAX_JSON_DEPTH levels."""
    waiting = [(value, 1)]
    while waiting:
        node, depth = waiting.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > MAX_JSON_DEPTH:
            raise InvalidArgument(_too_deep(source))
        waiting.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def _too_deep(source: str) -> str:
    return f"{source}: the JSON nests deeper than {MAX_JSON_DEPTH} levels (the limit for a JSON document here)"


def _bracket_depth(data: str | bytes | bytearray) -> int:
    """How deep the brackets of a JSON text nest, outside strings (for the message of a document that failed)."""
    text = data.decode("utf-8", "replace") if isinstance(data, (bytes, bytearray)) else data
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def _message_from_json(data: dict[str, Any] | str | bytes, source: str) -> pb.ModelConfig:
    if isinstance(data, (str, bytes, bytearray)):
        data = load_json(data, source)
    else:
        check_json_depth(data, source)
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
    reason = reason.replace(PACKAGE_PREFIX, "").rstrip(".")
    return f"{where}: field '{field}': {reason}" if field else f"{where}: {reason}"


def _describe_json_error(message: str, source: str) -> str:
    """Rewrite protobuf's JSON error into 'file: path: what'."""
    if match := _UNKNOWN_FIELD.search(message):
        path = _short(match.group(3) or match.group(1))
        return f"{source}: unknown field '{match.group(2)}' in {path}"
    if "should not have multiple" in message and "oneof" in message:
        return f"{source}: only one of dynamic_batching, sequence_batching, ensemble_scheduling may be set"
    # protobuf nests "Failed to parse <field> field: " per level and sometimes ends with " at <path>"
    message = message.replace(PACKAGE_PREFIX, "")
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
    return type_name.removeprefix(PACKAGE_PREFIX)


def _enum_names(type_name: str) -> list[str]:
    enum = pb.DESCRIPTOR.pool.FindEnumTypeByName(PACKAGE_PREFIX + _short(type_name))
    return [value.name for value in enum.values if not value.name.endswith("_INVALID")]
