"""A model's description from its own config, for a model registered without one (an import, a seed): the
config's `description` parameter when it has one, else what it takes and gives ("onnxruntime: INPUT0 INT32 [16],
INPUT1 INT32 [16] → OUTPUT0 INT32 [16], OUTPUT1 INT32 [16]; sequences")."""

from __future__ import annotations

from engine.api import ModelConfig

MOST_CHARACTERS = 300


def _tensors(tensors: list) -> str:
    return ", ".join(f"{t.name} {t.data_type.removeprefix('TYPE_')} {list(t.dims)}" for t in tensors) or "nothing"


def describe(config: ModelConfig | None) -> str:
    """One line a person reads on the model's page and in the models list."""
    if config is None:
        return ""
    given = str(config.parameters.get("description", "")).strip()
    if given:
        return given[:MOST_CHARACTERS]
    kind = "ensemble" if config.ensemble_scheduling else config.backend or config.platform or "model"
    traits = [
        word
        for word, present in (
            ("sequences", config.sequence_batching),
            ("streams its answers", config.decoupled),
            ("dynamic batching", config.dynamic_batching),
        )
        if present
    ]
    # a backend that reads its tensors from its files (the encoder, an llm) declares none in its config
    takes = f"{_tensors(config.input)} → {_tensors(config.output)}" if config.input or config.output else ""
    line = f"{kind}: {takes or 'tensors as its files declare them'}" + (f"; {', '.join(traits)}" if traits else "")
    return line if len(line) <= MOST_CHARACTERS else line[: MOST_CHARACTERS - 1] + "…"
