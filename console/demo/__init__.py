"""The seeded demo models: the demo repository, its ensemble pipeline, sequence models and text generator."""

from __future__ import annotations

# what INFERA_DEMO_MODELS and `serve --demo-models` may name; `digits_pipeline` brings its steps (digits too)
DEMO_MODELS = (
    "simple",
    "simple_string",
    "simple_sequence",
    "simple_dyna_sequence",
    "simple_sequence_onnx",
    "digits",
    "digits_pipeline",
    "text_generator",
    "smollm2",
    "all-minilm-l6-v2",
)


def demo_models(names: list[str], source: str) -> tuple[str, ...]:
    """The demo models `names` chooses, checked against DEMO_MODELS (ValueError names `source` and the unknown one)."""
    names = [name.strip() for name in names]
    unknown = [name for name in names if name not in DEMO_MODELS]
    if unknown:
        raise ValueError(f"{source}: no demo model {unknown[0]!r}; choose among {', '.join(DEMO_MODELS)}")
    return tuple(name for name in DEMO_MODELS if name in names)
