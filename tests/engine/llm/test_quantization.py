"""`quantization` "int8" and "int4" on the CPU: the linear layers in int8 or 4-bit groups, logits close to float32's,
generation through the server; any other value, or int8 with another dtype, refused at load naming it."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.errors import LoadError
from engine.llm.kv_blocks import BlockManager
from engine.llm.model_runner import ModelRunner
from engine.llm.quantization import INT4_GROUP, Int4Linear, Int8Linear, quantize_int4
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


def test_it_computes_int4_as_the_weights_its_groups_stand_for():
    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 48, bias=True)
    quantized = Int4Linear(linear)
    weight = linear.weight.detach().reshape(48, 96 // INT4_GROUP, INT4_GROUP)
    low, high = weight.amin(-1, keepdim=True), weight.amax(-1, keepdim=True)
    scale = (high - low) / 15
    dequantized = (low + torch.round((weight - low) / scale) * scale).reshape(48, 96)
    x = torch.randn(5, 96)
    want = torch.nn.functional.linear(x, dequantized, linear.bias)
    assert torch.allclose(quantized(x), want, atol=1e-4)
    assert (quantized(x) - linear(x)).abs().max() < (want - linear(x)).abs().max() + 1e-4  # its error is the grid's
    assert not Int4Linear.fits(torch.nn.Linear(96, 40)) and not Int4Linear.fits(torch.nn.Linear(40, 48))


def snapped_to_int4_grid(linear: torch.nn.Linear) -> None:
    """The weight moved onto its own 4-bit grid, as a GGUF Q4_1 file's dequantized weights already are."""
    outputs, inputs = linear.weight.shape
    groups = linear.weight.detach().reshape(outputs, inputs // INT4_GROUP, INT4_GROUP)
    low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
    scale = (high - low) / 15
    linear.weight.data = (low + torch.round((groups - low) / scale) * scale).reshape(outputs, inputs)


def test_it_gives_a_q4_1_models_logits_under_int4(tiny_llama_folder: Path):
    exact = ModelRunner.load(find_weights(tiny_llama_folder))
    for layer in exact.model.model.layers:
        for module in layer.modules():
            if isinstance(module, torch.nn.Linear):
                snapped_to_int4_grid(module)
    quantized = ModelRunner(quantize_int4(copy.deepcopy(exact.model)), exact.tokenizer)
    assert isinstance(quantized.model.model.layers[0].mlp.down_proj, Int4Linear)
    assert not isinstance(quantized.model.lm_head, Int4Linear)  # the output matrix keeps its precision
    for prompt in PROMPTS:
        ids = exact.tokenizer(prompt)["input_ids"]
        want, got = next_token_logits(exact, ids), next_token_logits(quantized, ids)
        assert torch.allclose(want, got, atol=1e-3) and want.argmax() == got.argmax()


@pytest.mark.asyncio
async def test_it_generates_with_int8_and_refuses_other_values_naming_them(tiny_llama_folder: Path, tmp_path: Path):
    configs = {
        "int8": 'parameters { key: "quantization" value: { string_value: "int8" } }\n',
        "int4": 'parameters { key: "quantization" value: { string_value: "int4" } }\n',
        "int3": 'parameters { key: "quantization" value: { string_value: "int3" } }\n',
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
        for name in ("int8", "int4"):
            stream = await server.infer_stream(InferenceRequest(name, inputs, batch_size=1))
            answers = [r async for r in stream if not r.empty]
            assert answers[-1].error is None and answers[-1].outputs["completion_tokens"][0] == 6
        assert "'int3'" in server.status("int3").versions[1].reason
        assert "bfloat16" in server.status("bf16_int8").versions[1].reason
        with pytest.raises(LoadError) as refused:
            await server.load_model("int3")
        assert refused.value.status == 400 and "quantization" in refused.value.reason
    finally:
        await server.stop()
