"""The model runner: one `StepPlan` in one forward pass, the KV cache in Infera's own paged pool.

transformers gives the model definition (a Llama-family causal LM: embeddings, decoder layers, rotary embeddings,
final norm, LM head); the runner drives its decoder layers itself, with every token the plan schedules (decodes
first, then prefill chunks of several sequences) in one row of shape [1, tokens], positions from each sequence's
offsets. Attention is `paged_attention`, registered with transformers' `AttentionInterface` as "infera_paged":
- the cache is a pair of tensors per layer, K and V, of [num_blocks, block_size, kv_heads, head_dim]; token i of a
  sequence lives in slot `table[i // block_size] * block_size + i % block_size` (the block manager's layout);
- each layer first writes the step's new K/V into their slots, then each sequence's queries attend over its own
  gathered slots: decodes together (one query each, padded to the longest context, the padding masked), each
  prefill chunk alone with the causal rule shifted by its start (query j sees keys up to start + j).
Only the rows that sample go through the final norm and the LM head. Greedy output equals transformers' own
greedy `generate` on the same weights and dtype (tests/engine/llm/test_model_runner.py holds it to that in fp32).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F  # noqa: N812 - torch's own spelling

from engine.errors import LoadError
from engine.llm.quantization import check_quantization, quantize_int4, quantize_int8
from engine.llm.scheduler import StepPlan
from engine.llm.weights import WeightsSource, load_model, load_tokenizer
from engine.serving.memory_return import keep_freed_memory_returnable, release_memory

ATTENTION_NAME = "infera_paged"


class PagedKVCache:
    """K and V per layer, [num_blocks, block_size, kv_heads, head_dim] each; `flat` views index slots."""

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
    ) -> None:
        shape = (num_blocks, block_size, kv_heads, head_dim)
        self.block_size = block_size
        self.key = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.value = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.flat_key = [k.view(-1, kv_heads, head_dim) for k in self.key]
        self.flat_value = [v.view(-1, kv_heads, head_dim) for v in self.value]

    @staticmethod
    def bytes_per_block(num_layers: int, block_size: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * block_size * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


@dataclass(slots=True)
class PrefillSpan:
    """One prefill chunk inside the step's row: queries `begin`..`end`, its context's slots, its causal mask."""

    begin: int
    end: int
    slots: torch.Tensor  # [context] slot of each position 0..start + n - 1
    mask: torch.Tensor | None  # [n, context] True where attention is allowed; None: plain causal (start 0)


@dataclass(slots=True)
class StepInputs:
    """What every layer's attention needs for one step, built once per step."""

    cache: PagedKVCache
    slots: torch.Tensor  # [tokens] where each new token's K/V goes
    num_decodes: int  # the first rows of the step are decodes, one token each
    decode_slots: torch.Tensor | None  # [decodes, longest context]
    decode_mask: torch.Tensor | None  # [decodes, 1, 1, longest context], None when every context is as long
    prefills: list[PrefillSpan]


def slot_ids(table: tuple[int, ...], start: int, end: int, block_size: int) -> list[int]:
    """The cache slots of positions start..end-1 of a sequence with this block table."""
    return [table[i // block_size] * block_size + i % block_size for i in range(start, end)]


def _table_slots(tables: torch.Tensor, block_size: int) -> torch.Tensor:
    """[rows, blocks] block tables as [rows, blocks * block_size] slots, position by position."""
    offsets = torch.arange(block_size, device=tables.device)
    return (tables.unsqueeze(2) * block_size + offsets).reshape(tables.shape[0], -1)


def step_inputs(plan: StepPlan, cache: PagedKVCache, device: torch.device) -> StepInputs:
    """Slots, gathers and masks of a plan (decodes first, then prefills, as the plan lists its chunks)."""
    size = cache.block_size
    new_slots: list[int] = []
    for chunk in plan.chunks:
        new_slots += slot_ids(chunk.block_table, chunk.start, chunk.start + chunk.num_tokens, size)
    decode_slots = decode_mask = None
    if plan.decodes:
        lengths = [chunk.start + 1 for chunk in plan.decodes]
        longest = max(lengths)
        widest = -(-longest // size)
        tables = [list(c.block_table[:widest]) + [0] * (widest - len(c.block_table[:widest])) for c in plan.decodes]
        decode_slots = _table_slots(torch.tensor(tables, dtype=torch.long, device=device), size)[:, :longest]
        if min(lengths) != longest:
            length = torch.tensor(lengths, device=device).unsqueeze(1)
            decode_mask = (torch.arange(longest, device=device).unsqueeze(0) < length)[:, None, None, :]
    prefills: list[PrefillSpan] = []
    row = len(plan.decodes)
    for chunk in plan.prefills:
        end = chunk.start + chunk.num_tokens
        table = torch.tensor(chunk.block_table[: -(-end // size)], dtype=torch.long, device=device)
        slots = _table_slots(table.unsqueeze(0), size)[0, :end]
        mask = None
        if chunk.start:
            keys = torch.arange(end, device=device).unsqueeze(0)
            queries = torch.arange(chunk.start, end, device=device).unsqueeze(1)
            mask = keys <= queries
        prefills.append(PrefillSpan(row, row + chunk.num_tokens, slots, mask))
        row += chunk.num_tokens
    slots = torch.tensor(new_slots, dtype=torch.long, device=device)
    return StepInputs(cache, slots, len(plan.decodes), decode_slots, decode_mask, prefills)


def paged_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    infera_step: StepInputs | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention contract ([1, heads, tokens, dim] in, [1, tokens, heads, dim] out) over the pool."""
    if infera_step is None:
        raise RuntimeError("infera_paged attention runs only inside Infera's model runner (no step inputs given)")
    step = infera_step
    layer = module.layer_idx
    k_cache, v_cache = step.cache.flat_key[layer], step.cache.flat_value[layer]
    k_cache.index_copy_(0, step.slots, key[0].transpose(0, 1).to(k_cache.dtype))
    v_cache.index_copy_(0, step.slots, value[0].transpose(0, 1).to(v_cache.dtype))
    q = query[0]  # [heads, tokens, dim]
    out = torch.empty(q.shape[1], q.shape[0], q.shape[2], dtype=q.dtype, device=q.device)
    gqa = q.shape[0] != key.shape[1]
    if step.num_decodes:
        d = step.num_decodes
        keys = _gather(k_cache, step.decode_slots).transpose(1, 2)  # [decodes, kv_heads, context, dim]
        values = _gather(v_cache, step.decode_slots).transpose(1, 2)
        queries = q[:, :d, :].transpose(0, 1).unsqueeze(2)  # [decodes, heads, 1, dim]
        if q.dtype == torch.float32:
            attended = F.scaled_dot_product_attention(
                queries, keys, values, attn_mask=step.decode_mask, scale=scaling, enable_gqa=gqa
            )
        else:
            attended = _decode_attention(queries, keys, values, step.decode_mask, scaling)
        out[:d] = attended[:, :, 0, :]
    for span in step.prefills:
        keys = _gather(k_cache, span.slots).transpose(0, 1).unsqueeze(0)  # [1, kv_heads, context, dim]
        values = _gather(v_cache, span.slots).transpose(0, 1).unsqueeze(0)
        queries = q[:, span.begin : span.end, :].unsqueeze(0)
        attended = F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=span.mask, is_causal=span.mask is None, scale=scaling, enable_gqa=gqa
        )
        out[span.begin : span.end] = attended[0].transpose(0, 1)
    return out.unsqueeze(0), None


def _gather(cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """The cache rows of `slots` ([..., context] -> [..., context, kv_heads, dim]); index_select, several times
    faster than indexing on the CPU."""
    return cache.index_select(0, slots.reshape(-1)).view(*slots.shape, *cache.shape[1:])


def _decode_attention(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None, scaling: float | None
) -> torch.Tensor:
    """One query per sequence ([decodes, heads, 1, dim]) over its keys ([decodes, kv_heads, context, dim]) as two
    matmuls, the scores and softmax in float32: in bfloat16 torch's CPU `scaled_dot_product_attention` with a mask
    took ten times as long (SmolLM2's shapes, 32 decodes; float32 keeps it, as fast and as transformers computes)."""
    d, heads, _, dim = queries.shape
    kv_heads = keys.shape[1]
    grouped = queries.reshape(d, kv_heads, heads // kv_heads, dim)  # query heads sharing a KV head side by side
    scores = torch.matmul(grouped, keys.transpose(2, 3)).float() * (dim**-0.5 if scaling is None else scaling)
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))
    attended = torch.matmul(scores.softmax(-1).to(values.dtype), values)
    return attended.reshape(d, heads, 1, dim)


def register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, paged_attention)


@dataclass(frozen=True, slots=True)
class ModelShape:
    num_layers: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int


class ModelRunner:
    """A causal LM and its tokenizer, executing step plans over a paged KV cache it owns."""

    def __init__(self, model: Any, tokenizer: Any, device: torch.device | str = "cpu") -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        inner = getattr(model, "model", None)
        needed = ("embed_tokens", "layers", "norm", "rotary_emb")
        if inner is None or not all(hasattr(inner, part) for part in needed) or not hasattr(model, "lm_head"):
            raise LoadError(
                f"architecture {type(model).__name__} is not a Llama-family causal LM (embeddings, decoder layers, "
                "rotary embeddings, norm, lm_head)"
            )
        self.inner = inner
        config = model.config
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        self.shape = ModelShape(
            num_layers=config.num_hidden_layers,
            kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=head_dim,
            vocab_size=config.vocab_size,
            max_position_embeddings=getattr(config, "max_position_embeddings", 2048),
        )
        self.dtype = next(model.parameters()).dtype
        self.cache: PagedKVCache | None = None
        self.lora: Any = None  # engine.llm.adapters.LoRASet once a LoRA adapter is added on this model

    @classmethod
    def load(
        cls, source: WeightsSource, dtype: str = "float32", device: str = "cpu", quantization: str = "none"
    ) -> ModelRunner:
        check_quantization(quantization, dtype, device)
        keep_freed_memory_returnable()
        register_attention()
        tokenizer = load_tokenizer(source)
        model = load_model(source, dtype, ATTENTION_NAME).to(device)
        if quantization == "int8":
            quantize_int8(model)
        elif quantization == "int4":
            quantize_int4(model)
        return cls(model, tokenizer, device)

    def block_bytes(self, block_size: int) -> int:
        s = self.shape
        return PagedKVCache.bytes_per_block(s.num_layers, block_size, s.kv_heads, s.head_dim, self.dtype)

    def allocate_cache(self, num_blocks: int, block_size: int) -> PagedKVCache:
        s = self.shape
        self.cache = PagedKVCache(s.num_layers, num_blocks, block_size, s.kv_heads, s.head_dim, self.dtype, self.device)
        return self.cache

    def close(self) -> None:
        """Drop the model and the KV cache (the engine has stopped), then hand their freed memory back."""
        self.cache = self.lora = None
        self.model = self.inner = None
        release_memory()

    @torch.inference_mode()
    def execute(self, plan: StepPlan) -> tuple[list[Hashable], torch.Tensor]:
        """Run every chunk of the plan in one forward pass; the ids of the sampling chunks and their logits."""
        if self.cache is None:
            raise RuntimeError("the model runner has no KV cache (allocate_cache first)")
        tokens: list[int] = []
        positions: list[int] = []
        sampling: list[Hashable] = []
        rows: list[int] = []
        for chunk in plan.chunks:
            tokens += chunk.token_ids
            positions += range(chunk.start, chunk.start + chunk.num_tokens)
            if chunk.samples:
                sampling.append(chunk.seq_id)
                rows.append(len(tokens) - 1)
        step = step_inputs(plan, self.cache, self.device)
        if self.lora is not None:
            self.lora.begin_step(plan.chunks)  # each adapter's rows of this step, for its hooks
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        position_ids = torch.tensor([positions], dtype=torch.long, device=self.device)
        hidden = self.inner.embed_tokens(ids)
        rotary = self.inner.rotary_emb(hidden, position_ids=position_ids)
        for layer in self.inner.layers[: self.shape.num_layers]:
            hidden = layer(
                hidden, attention_mask=None, position_ids=position_ids, position_embeddings=rotary, infera_step=step
            )
            if isinstance(hidden, tuple):  # decoder layers of older definitions return (hidden, ...)
                hidden = hidden[0]
        picked = hidden[0, torch.tensor(rows, dtype=torch.long, device=self.device)]
        logits = self.model.lm_head(self.inner.norm(picked))
        return sampling, logits.float()
