"""An edited config checked against its stored version without loading it: errors name the field."""

from __future__ import annotations

import re

import pytest

from engine.config.text_format import parse_config_pbtxt
from engine.errors import CodeRefused, InferaError
from engine.serving.admission import SYSTEM, Principal, check_config
from engine.settings import EngineSettings
from tests.engine.model_factory import make_simple_onnx, make_simple_string, simple_string_config

SETTINGS = EngineSettings()
OPERATOR = Principal("otto", may_change_models=True)


@pytest.fixture
def simple_version(tmp_path):
    return make_simple_onnx(tmp_path, name="simple") / "1"


def test_it_completes_a_valid_edit_from_the_model_file(simple_version):
    edited = parse_config_pbtxt(
        'name: "simple" max_batch_size: 4 dynamic_batching { max_queue_delay_microseconds: 50 }'
    )
    effective = check_config("simple", simple_version, edited, OPERATOR, SETTINGS)
    assert effective.max_batch_size == 4 and [t.name for t in effective.input] == ["INPUT0", "INPUT1"]
    assert effective.dynamic_batching.max_queue_delay_microseconds == 50


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name: "simple" max_batch_size: -1', "model 'simple': max_batch_size must be 0 or more, got -1"),
        ('name: "other"', "the config names the model 'other', its folder is 'simple'"),
        (
            'name: "simple" max_batch_size: 8 input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [16] }]',
            "input 'INPUT0'",
        ),
        (
            'name: "simple" max_batch_size: 8 dynamic_batching { preferred_batch_size: [16] }',
            "preferred_batch_size",
        ),
        ('name: "simple" instance_group [{ count: 100000 }]', "instance_group asks for 100000 instances"),
    ],
)
def test_it_refuses_an_edit_with_the_engines_message(simple_version, text, message):
    with pytest.raises(InferaError, match=re.escape(message)):
        check_config("simple", simple_version, parse_config_pbtxt(text), OPERATOR, SETTINGS)


def test_it_refuses_code_to_a_caller_who_may_not_load_it_without_running_it(tmp_path):
    version = make_simple_string(tmp_path) / "1"
    (version / "model.py").write_text("raise SystemExit('the model ran')\n")  # completing it would run this
    config = simple_string_config()
    with pytest.raises(CodeRefused):
        check_config("simple_string", version, config, OPERATOR, SETTINGS)
    assert check_config("simple_string", version, config, SYSTEM, SETTINGS).backend == "python"
