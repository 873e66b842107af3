"""Try it's plan from a model's config: sequences, image inputs, and a real digit where zeros would say nothing; the
static sample image is the sample digit drawn."""

from __future__ import annotations

import numpy as np

from console.demo.pipeline import PIPELINE_CONFIG, digit_image, png_bytes
from console.demo.repository import DIGITS_CONFIG, SIMPLE_CONFIG
from console.demo.sequences import SIMPLE_SEQUENCE_CONFIG
from console.registry.try_it import SAMPLE_DIGIT, SAMPLE_IMAGE, try_it_plan
from engine.api import config_to_dict, parse_config_pbtxt
from tests.conftest import REPO_ROOT


def plan_of(text: str) -> dict:
    return try_it_plan(config_to_dict(parse_config_pbtxt(text)))


def test_it_gives_a_sequence_model_sequence_controls():
    assert plan_of(SIMPLE_SEQUENCE_CONFIG)["sequence"] is True
    assert plan_of(SIMPLE_CONFIG) == {"sequence": False, "image_inputs": [], "examples": {}}


def test_it_sends_a_png_to_an_image_input_and_a_digit_to_the_digits_model():
    assert plan_of(PIPELINE_CONFIG)["image_inputs"] == ["IMAGE"]
    assert plan_of(DIGITS_CONFIG)["examples"] == {"image": SAMPLE_DIGIT}


def test_it_bundles_the_sample_digit_as_its_sample_image():
    drawn = png_bytes(digit_image(np.array(SAMPLE_DIGIT)))
    assert (REPO_ROOT / "static" / SAMPLE_IMAGE).read_bytes() == drawn
