"""A model registered without a description (an import, the seed) is described from its own config."""

from __future__ import annotations

from console.demo.repository import MINILM_CONFIG, SIMPLE_CONFIG
from console.demo.sequences import SIMPLE_SEQUENCE_CONFIG
from console.registry.describe import describe
from engine.api import parse_config_pbtxt


def test_it_says_what_a_model_takes_and_gives():
    assert describe(parse_config_pbtxt(SIMPLE_CONFIG)) == (
        "onnxruntime: INPUT0 INT32 [16], INPUT1 INT32 [16] → OUTPUT0 INT32 [16], OUTPUT1 INT32 [16]; dynamic batching"
    )


def test_it_says_nothing_of_tensors_a_config_leaves_to_the_models_files():
    """The sentence encoder's config declares no tensors: not "encoder: nothing → nothing"."""
    assert describe(parse_config_pbtxt(MINILM_CONFIG)) == "encoder: tensors as its files declare them; dynamic batching"


def test_it_names_sequences():
    assert describe(parse_config_pbtxt(SIMPLE_SEQUENCE_CONFIG)).endswith("; sequences")


def test_it_prefers_the_configs_own_description():
    config = parse_config_pbtxt(
        SIMPLE_CONFIG + 'parameters { key: "description" value: { string_value: "Subtracts and adds." } }\n'
    )
    assert describe(config) == "Subtracts and adds."


def test_it_describes_nothing_without_a_config():
    assert describe(None) == ""
