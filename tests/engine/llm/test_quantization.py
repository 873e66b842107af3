"""`quantization: "int8"` on the CPU: the decoder's linear layers in int8, logits close to float32's, generation
through the server; any other value, or int8 with another dtype, refused at load naming it."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.errors import LoadError
from engine.llm.kv_blocks import BlockManager
from engine.llm.model_runner import ModelRunner
from engine.llm.quantization import Int8Linear
from engine.llm.scheduler import LLMScheduler, LLMSequence
from engine.llm.weights import find_weights
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings
from engine.types import InferenceRequest
from tests.engine.llm.test_llm_backend import CONFIG
from tests.engine.llm.tiny_llama import PROMPTS

# measured on the tiny random Llama (its logits span about +-10): int8 weights move them by 0.08 on average (0.18 for
# the worst of the 10 prompts), and greedy picks agree with float32's at all 10 prompts' next tokens; the bounds
# leave over twice that room (the model is random: near ties are common)
MEAN_DRIFT = 0.2
MIN_AGREEMENT = 0.8


def next_token_logits(runner: ModelRunner, prompt: list[int]) -> torch.Tensor:
    """The logits of the token after `prompt`, through the runner's own paged forward."""
    scheduler = LLMScheduler(BlockManager(64, 4, False), 512, 8, 200)
    runner.allocate_cache(64, 4)
    scheduler.add_request(LLMSequence("one", list(prompt), 1, 0.0))
    _, logits = runner.execute(scheduler.schedule(0.0))
    return logits[0]


def test_it_keeps_int8_logits_close_to_float32(tiny_llama_folder: Path):
    source = find_weights(tiny_llama_folder)
    exact = ModelRunner.load(source)
    quantized = ModelRunner.load(source, quantization="int8")
    assert any(isinstance(m, Int8Linear) for m in quantized.model.modules())
    drift, agree = [], []
    for prompt in PROMPTS:
        ids = exact.tokenizer(prompt)["input_ids"]
        want, got = next_token_logits(exact, ids), next_token_logits(quantized, ids)
        drift.append((want - got).abs().mean().item())
        agree.append(bool(want.argmax() == got.argmax()))
    print(f"mean drift {np.mean(drift):.3f} (max {max(drift):.3f}), greedy agreement {np.mean(agree):.2f}")
    assert np.mean(drift) < MEAN_DRIFT
    assert np.mean(agree) >= MIN_AGREEMENT


@pytest.mark.asyncio
async def test_it_generates_with_int8_and_refuses_other_values_naming_them(tiny_llama_folder: Path, tmp_path: Path):
    configs = {
        "int8": 'parameters { key: "quantization" value: { string_value: "int8" } }\n',
        "int4": 'parameters { key: "quantization" value: { string_value: "int4" } }\n',
        "bf16_int8": 'parameters { key: "quantization" value: { string_value: "int8" } }\n'
        'parameters { key: "dtype" value: { string_value: "bfloat16" } }\n',
    }
    for name, extra in configs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text(CONFIG.replace('name: "tiny"', f'name: "{name}"') + extra)
        shutil.copytree(tiny_llama_folder, tmp_path / name / "1")
    server = InferenceServer(tmp_path, gpu_count=0, settings=EngineSettings())
    await server.start(load_models=True)
    try:
        inputs = {"text_input": np.array([b"the quick brown fox"], dtype=np.object_)}
        inputs["max_tokens"] = np.array([6], dtype=np.int32)
        stream = await server.infer_stream(InferenceRequest("int8", inputs, batch_size=1))
        answers = [r async for r in stream if not r.empty]
        assert answers[-1].error is None and answers[-1].outputs["completion_tokens"][0] == 6
        assert "'int4'" in server.status("int4").versions[1].reason
        assert "bfloat16" in server.status("bf16_int8").versions[1].reason
        with pytest.raises(LoadError) as refused:
            await server.load_model("int4")
        assert refused.value.status == 400 and "quantization" in refused.value.reason
    finally:
        await server.stop()
