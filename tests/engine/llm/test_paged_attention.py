"""Paged attention's decode path in reduced precision: two matmuls with float32 scores, as torch's SDPA computes."""

from __future__ import annotations

import torch
from torch.nn import functional as F  # noqa: N812 - torch's own spelling

from engine.llm.model_runner import _decode_attention


def test_it_attends_bfloat16_decodes_as_sdpa_does_in_float32_with_grouped_heads_and_padding():
    generator = torch.Generator().manual_seed(0)
    decodes, heads, kv_heads, context, dim = 5, 9, 3, 37, 64
    queries = torch.randn(decodes, heads, 1, dim, generator=generator)
    keys = torch.randn(decodes, kv_heads, context, dim, generator=generator)
    values = torch.randn(decodes, kv_heads, context, dim, generator=generator)
    lengths = torch.tensor([37, 1, 20, 36, 5])
    mask = (torch.arange(context)[None, :] < lengths[:, None])[:, None, None, :]
    expected = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, scale=0.125, enable_gqa=True)
    bf16 = [t.to(torch.bfloat16) for t in (queries, keys, values)]
    got = _decode_attention(*bf16, mask, 0.125)
    assert got.shape == expected.shape and got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), expected, atol=3e-2, rtol=3e-2)
    unmasked = F.scaled_dot_product_attention(queries, keys, values, enable_gqa=True)
    torch.testing.assert_close(_decode_attention(*bf16, None, None).float(), unmasked, atol=3e-2, rtol=3e-2)
