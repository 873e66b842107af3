"""What a model page's Try it needs to build a request the model accepts, read from the model's config: whether it
takes sequences (a correlation id and START/END), which BYTES inputs carry an image (sent as a PNG through the
binary tensor extension, the bundled sample by default) and sample values where zeros would say nothing (an 8x8
digit for a 64-value input named like an image)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# the fourth sample of scikit-learn's 8x8 digits dataset, a 3 (ink from 0 to 16); the static sample PNG draws it
SAMPLE_DIGIT = [
    *[0, 0, 7, 15, 13, 1, 0, 0, 0, 8, 13, 6, 15, 4, 0, 0, 0, 2, 1, 13, 13, 0, 0, 0, 0, 0, 2, 15, 11, 1, 0, 0],
    *[0, 0, 0, 1, 12, 12, 1, 0, 0, 0, 0, 0, 1, 10, 8, 0, 0, 0, 8, 4, 5, 14, 9, 0, 0, 0, 7, 13, 13, 9, 0, 0],
]
SAMPLE_DIGIT_LABEL = 3
SAMPLE_IMAGE = "registry/sample-digit.png"  # under static/, drawn by console.demo.pipeline from SAMPLE_DIGIT
IMAGE_WORDS = ("image", "img", "png", "jpeg", "jpg", "picture", "photo")


def _looks_like_image(name: str) -> bool:
    return any(word in name.lower() for word in IMAGE_WORDS)


def _elements(tensor: Mapping[str, Any]) -> int:
    count = 1
    for dim in tensor.get("dims") or []:
        count *= max(int(dim), 1)
    return count


def try_it_plan(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The plan as the page's script reads it: {"sequence", "image_inputs", "examples"}."""
    inputs = list((config or {}).get("input") or [])
    image_inputs = [t["name"] for t in inputs if t.get("data_type") == "TYPE_STRING" and _looks_like_image(t["name"])]
    examples = {
        t["name"]: SAMPLE_DIGIT
        for t in inputs
        if t.get("data_type", "").startswith("TYPE_FP") and _looks_like_image(t["name"]) and _elements(t) == 64
    }
    return {
        "sequence": bool((config or {}).get("sequence_batching")),
        "image_inputs": image_inputs,
        "examples": examples,
    }
