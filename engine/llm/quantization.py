"""Weight quantization of a language model on the CPU: the config parameter `quantization: "int8"`.

The linear layers of the decoder (attention and MLP projections) keep their weights in int8, one scale per output
channel (symmetric: the channel's largest magnitude is 127), and compute with torch's own int8 weight-only matmul
(`torch._weight_int8pack_mm`); activations stay in float32, and so do embeddings, norms and the LM head, so the
logits keep their scale. Torch's dynamic int8 linear layers (`torch.ao.quantization.quantize_dynamic`, which also
quantize each step's activations) were measured too, on SmolLM2-135M on the 2-core CPU here: faster than the
weight-only matmul (prefill 9.1 against 2.0 tokens/s, decode 0.7 against 0.3 steps/s, both slower than float32's
and noisy: the cores were shared), but their greedy picks agreed with float32's at 13-14% of positions (SmolLM2's
activations have outlier channels that one activation scale cannot hold), the weight-only ones at 86% (bfloat16:
91%). Served (greedy, the demo's question, 8 tokens, one noisy run on 2 shared cores), SmolLM2's weights take 210 MiB
in int8 against 513 MiB in float32 and 257 MiB in bfloat16, and it answered "The capital of France is Paris." in
each at 3.8 tokens/s against 12.7 and 12.3: on this CPU int8 saves memory, not time. The peak while loading is
float32's (the weights are read in float32, then quantized).
It needs float32 weights and a CPU instance; anything else, and any other value, is refused at load naming it.
"""

from __future__ import annotations

from typing import Any

import torch

from engine.errors import LoadError

QUANTIZATIONS = ("none", "int8")


def check_quantization(value: str, dtype: str, device: str) -> str:
    """The quantization asked for, checked against the dtype and the device (a LoadError naming what is wrong)."""
    if value not in QUANTIZATIONS:
        raise LoadError(f"parameter 'quantization' must be one of {', '.join(QUANTIZATIONS)}, got '{value}'")
    if value == "int8" and dtype != "float32":
        raise LoadError(
            f"parameter 'quantization' int8 quantizes float32 weights: 'dtype' must be float32, got '{dtype}'"
        )
    if value == "int8" and device != "cpu":
        raise LoadError(f"parameter 'quantization' int8 runs on CPU instances only, not on '{device}'")
    return value


class Int8Linear(torch.nn.Module):
    """A linear layer whose weight is int8 with a scale per output channel, run by torch's weight-only matmul."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        scales = weight.abs().amax(dim=1).clamp(min=1e-12) / 127.0
        quantized = torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
        self.register_buffer("weight", quantized)
        self.register_buffer("scales", scales.to(linear.weight.dtype))
        self.bias = linear.bias
        self.out_features = linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        out = torch._weight_int8pack_mm(flat, self.weight, self.scales.to(x.dtype))
        out = out.reshape(*x.shape[:-1], self.out_features)
        return out if self.bias is None else out + self.bias


def quantize_int8(model: Any) -> Any:
    """The decoder layers' linear layers as Int8Linear, in place; the model returned."""
    for layer in model.model.layers:
        for module in list(layer.modules()):
            for name, child in list(module.named_children()):
                if isinstance(child, torch.nn.Linear):
                    setattr(module, name, Int8Linear(child))
    return model
