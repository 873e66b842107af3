"""Weight quantization of a language model on the CPU: the config parameter `quantization` ("int8" or "int4").

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

`"int4"` is for one user's latency: the decoder's linear layers keep 4-bit weights in groups of 32 inputs, a scale
and a minimum per group: the layout of a GGUF's Q4_1 blocks, so a Q4_1 file's own values come back (all 210 of
SmolLM2's decoder projections lie on that grid; its output matrix, stored otherwise, does not and stays as loaded,
so the logits keep their precision). They run by torch's int4 weight-only matmul for the CPU
(`_weight_int4pack_mm_for_cpu`), activations in the model's dtype (bfloat16 or float32). At one decode a step that
matmul reads a quarter of bfloat16's bytes: a 1536x576 projection took 218 against 604 µs (one thread, the 2-core
machine shared). At 32 rows it is several times slower than bfloat16's (2.6 against 0.4 ms): it serves single
streams, not batches. A layer whose outputs are not a multiple of 16 or inputs of 32 stays as it was.
"""

from __future__ import annotations

from typing import Any

import torch

from engine.errors import LoadError

QUANTIZATIONS = ("none", "int8", "int4")
INT4_GROUP = 32  # inputs per scale and minimum, as a GGUF Q4_1 block


def check_quantization(value: str, dtype: str, device: str) -> str:
    """The quantization asked for, checked against the dtype and the device (a LoadError naming what is wrong)."""
    if value not in QUANTIZATIONS:
        raise LoadError(f"parameter 'quantization' must be one of {', '.join(QUANTIZATIONS)}, got '{value}'")
    if value == "int8" and dtype != "float32":
        raise LoadError(
            f"parameter 'quantization' int8 quantizes float32 weights: 'dtype' must be float32, got '{dtype}'"
        )
    if value == "int4" and dtype not in ("float32", "bfloat16"):
        raise LoadError(
            f"parameter 'quantization' int4 computes in float32 or bfloat16: 'dtype' must be one of them, got '{dtype}'"
        )
    if value != "none" and device != "cpu":
        raise LoadError(f"parameter 'quantization' {value} runs on CPU instances only, not on '{device}'")
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

    @staticmethod
    def fits(linear: torch.nn.Linear) -> bool:
        return True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        return _shaped(self, x, torch._weight_int8pack_mm(flat, self.weight, self.scales.to(x.dtype)))


def _shaped(layer: Int8Linear | Int4Linear, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """A matmul's [rows, outputs] back in the input's leading shape, the layer's bias added."""
    out = out.reshape(*x.shape[:-1], layer.out_features)
    return out if layer.bias is None else out + layer.bias


def _replace_linears(model: Any, quantized: type[Int8Linear] | type[Int4Linear]) -> Any:
    """The decoder layers' linear layers that `quantized` fits, replaced by it in place; the model returned."""
    for layer in model.model.layers:
        for module in list(layer.modules()):
            for name, child in list(module.named_children()):
                if isinstance(child, torch.nn.Linear) and quantized.fits(child):
                    setattr(module, name, quantized(child))
    return model


def quantize_int8(model: Any) -> Any:
    """The decoder layers' linear layers as Int8Linear, in place; the model returned."""
    return _replace_linears(model, Int8Linear)


class Int4Linear(torch.nn.Module):
    """A linear layer whose weight is 4-bit in groups of INT4_GROUP inputs (a scale and a minimum each), run by
    torch's int4 weight-only matmul for the CPU."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        outputs, inputs = weight.shape
        groups = weight.reshape(outputs, inputs // INT4_GROUP, INT4_GROUP)
        low, high = groups.amin(dim=-1), groups.amax(dim=-1)
        scales = ((high - low) / 15.0).clamp(min=1e-12)
        levels = torch.round((groups - low[..., None]) / scales[..., None]).clamp(0, 15)
        # the kernel computes (level - 8) * scale + zero: zero = minimum + 8 * scale gives minimum + level * scale
        zeros = low + 8.0 * scales
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(levels.reshape(outputs, inputs).to(torch.int32), 8)
        self.register_buffer("packed", packed)
        self.register_buffer("scales_and_zeros", torch.stack([scales, zeros], dim=-1).transpose(0, 1).contiguous())
        self.bias = linear.bias
        self.out_features = outputs

    @staticmethod
    def fits(linear: torch.nn.Linear) -> bool:
        outputs, inputs = linear.weight.shape
        return outputs % 16 == 0 and inputs % INT4_GROUP == 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        table = self.scales_and_zeros.to(x.dtype)
        return _shaped(self, x, torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.packed, INT4_GROUP, table))


def quantize_int4(model: Any) -> Any:
    """The decoder layers' linear layers as Int4Linear where their shapes fit, in place; the model returned."""
    return _replace_linears(model, Int4Linear)
