"""JSON configs nested past a depth limit are refused naming it (issue 32, low): Python's parser recursed until
RecursionError, a 500, on a config nested some thousand levels deep; a /v2 load's `config` parameter too."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config.model_config import ModelConfig
from engine.config.text_format import MAX_JSON_DEPTH, load_json, merge_config, parse_config_json
from engine.errors import InvalidArgument, LoadError
from engine.serving.server import InferenceServer, config_override
from tests.engine.model_factory import make_simple_onnx

DEEP = '{"name": "m", "parameters": ' + "[" * 100_000 + "]" * 100_000 + "}"
JUST_TOO_DEEP = '{"name": "m", "parameters": ' + "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH + "}"


def nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"x": value}
    return value


@pytest.mark.parametrize("text", [DEEP, JUST_TOO_DEEP, DEEP.encode()])
def test_it_refuses_a_json_config_nested_too_deep_naming_the_limit(text):
    with pytest.raises(InvalidArgument, match=f"config.json: the JSON nests deeper than {MAX_JSON_DEPTH} levels"):
        parse_config_json(text)


def test_it_refuses_a_parsed_document_nested_too_deep():
    with pytest.raises(InvalidArgument, match="override: the JSON nests deeper than"):
        merge_config(ModelConfig(name="m"), {"parameters": nested(5000)}, source="override")
    assert load_json('{"a": ' * MAX_JSON_DEPTH + "1" + "}" * MAX_JSON_DEPTH, "text")  # the limit itself is fine


def test_a_syntax_error_still_names_the_syntax():
    with pytest.raises(InvalidArgument, match="config.json: not valid JSON"):
        parse_config_json('{"name": "m", "a": ["]"}')


async def test_a_v2_load_with_a_deep_config_parameter_is_a_400(tmp_path: Path):
    make_simple_onnx(tmp_path)
    with pytest.raises(LoadError, match="parameters.config: the JSON nests deeper") as refused:
        config_override("simple", DEEP)
    assert refused.value.status == 400
    server = InferenceServer(tmp_path, gpu_count=0)
    await server.start()
    try:
        with pytest.raises(LoadError, match="nests deeper than") as refused:
            await server.load_model("simple", config={"parameters": nested(3000)})
        assert refused.value.status == 400 and server.model_ready("simple")
    finally:
        await server.stop()
