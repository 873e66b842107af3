"""The demo generator's core: a character-level decoder-only transformer, its KV cache, and a continuous batcher.

It imports only the standard library and torch, never the project: its source is also the first half of the served
model.py (console.demo.generator appends the Triton glue), and tests import it from here.

Continuous (iteration-level) batching, as LLM backends do it: `ContinuousBatcher.step()` admits waiting sequences
(their prompt is prefilled into a free cache slot), drops cancelled ones, runs ONE forward pass that feeds every
running sequence its next token, samples, hands each sequence's new text to the `emit` callback, and retires the
sequences that finished (stop string, max_tokens, full context) at once. Running sequences hold cache slots
0..n-1, so the batch's keys and values are a view of the cache, never a gather; a retiring sequence's slot is
filled by the last running one (one sequence's keys and values copied, whatever the batch).

Inference runs in float64: a sequence's greedy tokens must not depend on which other sequences share its step, and
the kernels torch picks (and so the order of their sums) change with the batch's shape; in float64 those rounding
differences stay far below any gap between two logits, so a sequence alone and in a batch yields the same text.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 - torch's own spelling

NEWLINE = "\n"
ALPHABET = NEWLINE + "".join(chr(code) for code in range(32, 127))
UNKNOWN = "?"
# typographic characters that have an ASCII form; any other character outside ALPHABET reads as UNKNOWN
ASCII_FORMS = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-"}
ASCII_FORMS |= {"\u2026": "...", "\t": "    ", "\u00a0": " "}

WEIGHTS_FILE = "weights.pt"  # beside model.py in the version folder
FINISH_STOP = "stop"  # a stop string or nothing left to say
FINISH_LENGTH = "length"  # max_tokens, or the context is full
FINISH_CANCELLED = "cancelled"
FINISH_ERROR = "error"


class CharTokenizer:
    """Text <-> token ids, one character per token over ALPHABET (printable ASCII and newline)."""

    def __init__(self, alphabet: str = ALPHABET) -> None:
        self.alphabet = alphabet
        self.ids = {char: index for index, char in enumerate(alphabet)}
        self.table = str.maketrans(ASCII_FORMS)

    @property
    def size(self) -> int:
        return len(self.alphabet)

    def normalise(self, text: str) -> str:
        text = text.translate(self.table)
        return "".join(char if char in self.ids else UNKNOWN for char in text)

    def encode(self, text: str) -> list[int]:
        return [self.ids[char] for char in self.normalise(text)]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.alphabet[index] for index in ids)


@dataclass(frozen=True)
class ModelShape:
    """The transformer's size; saved beside its weights."""

    vocab: int = len(ALPHABET)
    width: int = 96
    layers: int = 2
    heads: int = 4
    context: int = 128

    @property
    def head_width(self) -> int:
        return self.width // self.heads


class Block(nn.Module):
    """Pre-norm attention and MLP, each added to the residual stream."""

    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        self.heads = shape.heads
        self.attention_norm = nn.LayerNorm(shape.width)
        self.qkv = nn.Linear(shape.width, 3 * shape.width)
        self.out = nn.Linear(shape.width, shape.width)
        self.mlp_norm = nn.LayerNorm(shape.width)
        self.mlp = nn.Sequential(
            nn.Linear(shape.width, 4 * shape.width), nn.GELU(), nn.Linear(4 * shape.width, shape.width)
        )

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values of `x` [batch, time, width], each [batch, heads, time, head_width]."""
        batch, time, _ = x.shape
        q, k, v = self.qkv(self.attention_norm(x)).view(batch, time, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        return q, k, v

    def finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """The residual stream after attention's output [batch, heads, time, head_width] and the MLP."""
        batch, _, time, _ = attended.shape
        x = x + self.out(attended.transpose(1, 2).reshape(batch, time, -1))
        return x + self.mlp(self.mlp_norm(x))


class CharTransformer(nn.Module):
    """A small GPT: token and learnt position embeddings, pre-norm blocks, a linear head over the alphabet."""

    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        self.shape = shape
        self.embed = nn.Embedding(shape.vocab, shape.width)
        self.position = nn.Embedding(shape.context, shape.width)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = nn.LayerNorm(shape.width)
        self.head = nn.Linear(shape.width, shape.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits [batch, time, vocab] of each next token (causal; for training)."""
        x = self.embed(tokens) + self.position(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            q, k, v = block.project(x)
            x = block.finish(x, F.scaled_dot_product_attention(q, k, v, is_causal=True))
        return self.head(self.norm(x))

    def prefill(self, cache: KVCache, slot: int, tokens: list[int]) -> None:
        """Write the keys and values of `tokens` (positions 0..n-1) into the cache's `slot`."""
        if not tokens:
            return
        ids = torch.tensor([tokens])
        x = self.embed(ids) + self.position(torch.arange(len(tokens)))
        for layer, block in enumerate(self.blocks):
            q, k, v = block.project(x)
            cache.keys[layer, slot, :, : len(tokens)] = k[0]
            cache.values[layer, slot, :, : len(tokens)] = v[0]
            x = block.finish(x, F.scaled_dot_product_attention(q, k, v, is_causal=True))

    def decode(self, cache: KVCache, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One step of slots 0..n-1: feed token i at position i, return the next token's logits [n, vocab]."""
        count = len(tokens)
        span = int(positions.max()) + 1  # the longest sequence's keys (a shorter one's extra ones are masked)
        rows = torch.arange(count)
        visible = (torch.arange(span)[None, :] <= positions[:, None])[:, None, None, :]  # [n, 1, 1, span]
        x = (self.embed(tokens) + self.position(positions))[:, None, :]
        for layer, block in enumerate(self.blocks):
            q, k, v = block.project(x)
            keys, values = cache.keys[layer], cache.values[layer]
            keys[rows, :, positions] = k[:, :, 0]
            values[rows, :, positions] = v[:, :, 0]
            attended = F.scaled_dot_product_attention(
                q, keys[:count, :, :span], values[:count, :, :span], attn_mask=visible
            )
            x = block.finish(x, attended)
        return self.head(self.norm(x[:, 0]))


class KVCache:
    """Keys and values of up to `slots` sequences: [layer, slot, head, position, head_width]."""

    def __init__(self, shape: ModelShape, slots: int, dtype: torch.dtype = torch.float64) -> None:
        size = (shape.layers, slots, shape.heads, shape.context, shape.head_width)
        self.slots = slots
        self.keys = torch.zeros(size, dtype=dtype)
        self.values = torch.zeros(size, dtype=dtype)

    def move(self, source: int, target: int, length: int) -> None:
        """Slot `source`'s first `length` positions into slot `target`."""
        self.keys[:, target, :, :length] = self.keys[:, source, :, :length]
        self.values[:, target, :, :length] = self.values[:, source, :, :length]


@dataclass(frozen=True)
class Sampling:
    """How one sequence chooses its tokens (vLLM's names; max_tokens counts characters here)."""

    max_tokens: int = 64
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def problems(self) -> list[str]:
        """What is wrong with these settings, in the request's words (empty when they are fine)."""
        found = []
        if self.max_tokens < 1:
            found.append(f"max_tokens must be at least 1, got {self.max_tokens}")
        if not self.temperature >= 0:
            found.append(f"temperature must be 0 or more, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            found.append(f"top_p must be in (0, 1], got {self.top_p}")
        if any(not isinstance(text, str) or not text for text in self.stop):
            found.append("stop must hold non-empty strings")
        return found


@dataclass(eq=False)
class Sequence:
    """One generation: its prompt, how it samples, and its progress (the batcher's to change)."""

    client: Any  # what the caller needs to answer it (the served model keeps its response sender here)
    prompt: str
    sampling: Sampling = Sampling()
    is_cancelled: Callable[[], bool] = lambda: False
    prompt_tokens: int = 0  # the prompt's tokens that were read (a long prompt keeps its end)
    generated: list[int] = field(default_factory=list)
    text: str = ""  # the generated text so far (the stop string cut off once seen)
    sent: int = 0  # how many characters of `text` were emitted
    length: int = 0  # positions in the cache
    pending: int = 0  # the token the next step feeds
    finish_reason: str | None = None
    error: str | None = None
    generator: torch.Generator | None = None


# emit(sequence, new text, finish reason or None): called on the generation thread, in step order
Emit = Callable[[Sequence, str, str | None], None]


class ContinuousBatcher:
    """Runs many sequences through one model, one forward pass per step for all of them.

    `submit` may be called from any thread; `step` (or `serve_forever`, which calls it) from one.
    `max_sequences` 1 serves one sequence at a time (no batching), for comparison.
    """

    def __init__(
        self,
        model: CharTransformer,
        tokenizer: CharTokenizer,
        emit: Emit,
        max_sequences: int = 64,
        on_step: Callable[[int], None] | None = None,
    ) -> None:
        if max_sequences < 1:
            raise ValueError(f"max_sequences must be at least 1, got {max_sequences}")
        self.model = model
        self.tokenizer = tokenizer
        self.emit = emit
        self.on_step = on_step
        self.cache = KVCache(model.shape, max_sequences, dtype=next(model.parameters()).dtype)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.steps = 0
        self.sequence_steps = 0  # sum over steps of the sequences each step fed
        self._wake = threading.Condition()
        self._closed = False

    def submit(self, sequence: Sequence) -> None:
        """Queue a sequence; it joins the running batch at the next step."""
        problems = sequence.sampling.problems()
        if problems:
            raise ValueError("; ".join(problems))
        with self._wake:
            self.waiting.append(sequence)
            self._wake.notify()

    def close(self) -> None:
        """Stop `serve_forever`; sequences still waiting or running are not finished."""
        with self._wake:
            self._closed = True
            self._wake.notify()

    def serve_forever(self) -> None:
        """Step while there is work; sleep on the condition while there is none; return once closed."""
        while True:
            with self._wake:
                while not self._closed and not self.waiting and not self.running:
                    self._wake.wait()
                if self._closed:
                    return
            try:
                self.step()
            except Exception as exc:  # a bug must not leave clients waiting forever
                self.fail_all(f"generation failed: {exc}")

    @torch.inference_mode()
    def step(self) -> int:
        """One iteration: admit, drop cancelled, one forward over the running batch, emit, retire. Returns the
        number of sequences the forward pass fed (0 when nothing ran)."""
        self._admit()
        for sequence in self.running:
            if sequence.is_cancelled():
                self._finish(sequence, FINISH_CANCELLED)
        self._retire()
        count = len(self.running)
        if not count:
            return 0
        tokens = torch.tensor([sequence.pending for sequence in self.running])
        positions = torch.tensor([sequence.length for sequence in self.running])
        logits = self.model.decode(self.cache, tokens, positions)
        chosen = self._choose(logits)
        self.steps += 1
        self.sequence_steps += count
        if self.on_step is not None:  # before the step's tokens go out: a finished client finds its steps counted
            self.on_step(count)
        for sequence, token in zip(self.running, chosen, strict=True):
            self._advance(sequence, token)
        self._retire()
        return count

    def _admit(self) -> None:
        context = self.model.shape.context
        with self._wake:
            joining = []
            while self.waiting and len(self.running) + len(joining) < self.cache.slots:
                joining.append(self.waiting.popleft())
        for sequence in joining:
            tokens = self.tokenizer.encode(sequence.prompt) or self.tokenizer.encode(NEWLINE)
            # keep the prompt's end, leaving room for max_tokens (up to half the context)
            room = min(sequence.sampling.max_tokens, context // 2)
            tokens = tokens[-(context - room) :]
            sequence.prompt_tokens = len(tokens)
            slot = len(self.running)
            self.model.prefill(self.cache, slot, tokens[:-1])
            sequence.length = len(tokens) - 1
            sequence.pending = tokens[-1]
            if sequence.sampling.temperature > 0:
                sequence.generator = torch.Generator()
                if sequence.sampling.seed is None:
                    sequence.generator.seed()
                else:
                    sequence.generator.manual_seed(sequence.sampling.seed)
            self.running.append(sequence)

    def _choose(self, logits: torch.Tensor) -> list[int]:
        """Greedy rows by one argmax; sampled rows' probabilities (temperature, top-p) in one batched pass, then a
        draw per row from its own generator (a seed is per request)."""
        chosen = logits.argmax(dim=-1).tolist()
        rows = [index for index, sequence in enumerate(self.running) if sequence.sampling.temperature > 0]
        if not rows:
            return chosen
        sampled = [self.running[index] for index in rows]
        temperatures = torch.tensor([[s.sampling.temperature] for s in sampled], dtype=logits.dtype)
        top_p = torch.tensor([[s.sampling.top_p] for s in sampled], dtype=logits.dtype)
        probabilities = nucleus(torch.softmax(logits[rows] / temperatures, dim=-1), top_p)
        for index, sequence, row in zip(rows, sampled, probabilities, strict=True):
            chosen[index] = int(torch.multinomial(row, 1, generator=sequence.generator))
        return chosen

    def _advance(self, sequence: Sequence, token: int) -> None:
        sequence.length += 1
        sequence.pending = token
        sequence.generated.append(token)
        piece = self.tokenizer.decode([token])
        sequence.text += piece
        stops = sequence.sampling.stop
        # only where the new piece could complete a stop string: the check costs the same at every length
        end = len(sequence.text)
        found = [
            index
            for index in (sequence.text.find(stop, max(0, end - len(piece) - len(stop) + 1)) for stop in stops)
            if index >= 0
        ]
        if found:
            sequence.text = sequence.text[: min(found)]
            self._finish(sequence, FINISH_STOP)
        elif len(sequence.generated) >= sequence.sampling.max_tokens or sequence.length >= self.model.shape.context:
            self._finish(sequence, FINISH_LENGTH)
        else:
            # hold back an end that may be the start of a stop string: it is not sent until that is decided
            held = max((overlap(sequence.text, stop) for stop in stops), default=0)
            ready = len(sequence.text) - held
            if ready > sequence.sent:
                piece = sequence.text[sequence.sent : ready]
                sequence.sent = ready
                self._send(sequence, piece, None)

    def _finish(self, sequence: Sequence, reason: str) -> None:
        sequence.finish_reason = reason
        piece = "" if reason in (FINISH_CANCELLED, FINISH_ERROR) else sequence.text[sequence.sent :]
        sequence.sent = len(sequence.text)
        self._send(sequence, piece, reason)

    def _send(self, sequence: Sequence, piece: str, reason: str | None) -> None:
        """Emit; a sequence whose answer cannot be sent leaves the batch (the others go on)."""
        try:
            self.emit(sequence, piece, reason)
        except Exception as exc:
            if reason == FINISH_ERROR:
                return  # the error itself could not be sent: nothing more to try
            sequence.finish_reason = FINISH_ERROR
            sequence.error = f"a response could not be sent: {exc}"
            self._send(sequence, "", FINISH_ERROR)

    def _retire(self) -> None:
        """Drop finished sequences: the last running one moves into each freed slot, so a retirement copies one
        sequence's keys and values (its positions only), whatever the batch; slots stay 0..n-1."""
        running = self.running
        slot = 0
        while slot < len(running):
            if running[slot].finish_reason is None:
                slot += 1
                continue
            last = running.pop()
            if slot < len(running):
                running[slot] = last
                self.cache.move(len(running), slot, last.length)
        self.running = running

    def fail_all(self, message: str) -> None:
        """End every waiting and running sequence with an error (a failed step, an unloading model)."""
        with self._wake:
            failing = [*self.running, *self.waiting]
            self.waiting.clear()
            self.running = []
        for sequence in failing:
            if sequence.finish_reason is None:
                sequence.error = message
                self._finish(sequence, FINISH_ERROR)


def sampling_from(settings: dict[str, Any]) -> Sampling:
    """Sampling from vLLM-style settings, whose numbers may come as strings; other keys are ignored (vLLM's clients
    send many this model has no use for). ValueError names a setting that is not what it should be."""
    values: dict[str, Any] = {}
    for name, kind in (("max_tokens", int), ("temperature", float), ("top_p", float), ("seed", int)):
        value = settings.get(name)
        if value is None:
            continue
        try:
            values[name] = kind(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a number, got {value!r}") from None
    stop = settings.get("stop")
    if stop is not None:
        values["stop"] = (stop,) if isinstance(stop, str) else tuple(stop) if isinstance(stop, list) else None
        if values["stop"] is None:
            raise ValueError(f"stop must be a string or a list of strings, got {stop!r}")
    sampling = Sampling(**values)
    problems = sampling.problems()
    if problems:
        raise ValueError("; ".join(problems))
    return sampling


def nucleus(probabilities: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Each row [n, vocab] kept to its likeliest tokens whose probability sums to its top_p [n, 1] (the first always
    stays); not renormalised, multinomial takes weights."""
    if bool((top_p >= 1).all()):
        return probabilities
    ordered, order = probabilities.sort(dim=-1, descending=True)
    before = ordered.cumsum(dim=-1) - ordered
    ordered = ordered.masked_fill(before >= top_p, 0)
    return torch.zeros_like(probabilities).scatter(-1, order, ordered)


def overlap(text: str, stop: str) -> int:
    """The length of the longest end of `text` that is a proper start of `stop`."""
    for size in range(min(len(text), len(stop) - 1), 0, -1):
        if text.endswith(stop[:size]):
            return size
    return 0


def load_model(path: str, dtype: torch.dtype = torch.float64) -> CharTransformer:
    """The transformer saved by `save_model`, for inference (weights_only: the file holds no code)."""
    saved = torch.load(path, map_location="cpu", weights_only=True)
    model = CharTransformer(ModelShape(**saved["shape"]))
    model.load_state_dict(saved["state"])
    return model.to(dtype).eval()


def save_model(model: CharTransformer, target: str | IO[bytes]) -> None:
    """The weights and the shape: tensors, numbers and names only."""
    shape = {name: getattr(model.shape, name) for name in ("vocab", "width", "layers", "heads", "context")}
    torch.save({"shape": shape, "state": model.state_dict()}, target)
