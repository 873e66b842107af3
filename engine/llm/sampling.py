"""Sampling parameters, validated, and a batched sampler over a step's logits (torch, no model).

Rules (vLLM's sampler, Infera's own code), for each row of logits [batch, vocab], in this order:
1. Logprobs, when asked for, are the model's own: log-softmax of the raw logits (vLLM's default `raw_logprobs`).
2. Penalties: repetition (tokens of the prompt or the output: a positive logit divided by it, a negative one
   multiplied), frequency (minus it times each token's count in the output) and presence (minus it once per token
   present in the output); then `logit_bias` is added.
3. Temperature below 1e-5 is greedy: the largest logit after step 2 (ties: the lowest token id, as torch.argmax
   and transformers' greedy `generate`). Otherwise the logits are divided by the temperature, then min_p (tokens
   under min_p times the top token's probability dropped), top_k, then top_p (the smallest set of most likely tokens
   whose probability reaches top_p, renormalised after top_k) truncate the distribution.
4. A token is drawn by the exponential race (argmax of p / E, E ~ Exp(1)): a seeded row draws E from its own
   `torch.Generator` (made once per sequence by `make_generator`, kept by the caller across steps), so its tokens
   are the same whatever else is in the batch; unseeded rows share the default generator.
`n` choices of one request are separate sequences; `for_choice(i)` gives choice i the seed `seed + i` (vLLM).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType

import torch

from engine.errors import InvalidArgument

GREEDY_BELOW = 1e-5  # a temperature under this is greedy (vLLM's epsilon)
MAX_LOGPROBS = 20  # alternatives per token, OpenAI's top_logprobs limit (vLLM's default max_logprobs)
MAX_LOGIT_BIAS = 100.0  # OpenAI's bound on a logit_bias value


class InvalidSamplingParam(InvalidArgument):
    """A sampling parameter out of its range; `field` names it as the request does."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name} {message}")
        self.field = name


def _int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSamplingParam(name, f"must be an integer, got {value!r}")
    return value


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidSamplingParam(name, f"must be a finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How one request samples; validated on construction, each error naming its field."""

    n: int = 1
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: every token
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    logprobs: int | None = None  # None: no logprobs; k: the chosen token's and the k most likely

    def __post_init__(self) -> None:
        if _int("n", self.n) < 1:
            raise InvalidSamplingParam("n", f"must be at least 1, got {self.n}")
        if _int("max_tokens", self.max_tokens) < 1:
            raise InvalidSamplingParam("max_tokens", f"must be at least 1, got {self.max_tokens}")
        if _number("temperature", self.temperature) < 0:
            raise InvalidSamplingParam("temperature", f"must be 0 (greedy) or more, got {self.temperature}")
        if not 0 < _number("top_p", self.top_p) <= 1:
            raise InvalidSamplingParam("top_p", f"must be in (0, 1], got {self.top_p}")
        if _int("top_k", self.top_k) < -1:
            raise InvalidSamplingParam("top_k", f"must be -1 or 0 (every token) or at least 1, got {self.top_k}")
        if not 0 <= _number("min_p", self.min_p) <= 1:
            raise InvalidSamplingParam("min_p", f"must be in [0, 1], got {self.min_p}")
        if _number("repetition_penalty", self.repetition_penalty) <= 0:
            raise InvalidSamplingParam(
                "repetition_penalty", f"must be greater than 0 (1 is none), got {self.repetition_penalty}"
            )
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2 <= _number(name, getattr(self, name)) <= 2:
                raise InvalidSamplingParam(name, f"must be in [-2, 2], got {getattr(self, name)}")
        if not isinstance(self.logit_bias, Mapping):
            raise InvalidSamplingParam("logit_bias", f"must map token ids to biases, got {self.logit_bias!r}")
        object.__setattr__(self, "logit_bias", MappingProxyType(dict(self.logit_bias)))  # frozen, like the rest
        for token, bias in self.logit_bias.items():
            if _int("logit_bias", token) < 0:
                raise InvalidSamplingParam("logit_bias", f"names token id {token}: token ids are 0 or more")
            if not -MAX_LOGIT_BIAS <= _number("logit_bias", bias) <= MAX_LOGIT_BIAS:
                raise InvalidSamplingParam("logit_bias", f"for token {token} must be in [-100, 100], got {bias}")
        if self.seed is not None:
            _int("seed", self.seed)
        if not isinstance(self.stop_token_ids, tuple):
            object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        for token in self.stop_token_ids:
            if _int("stop_token_ids", token) < 0:
                raise InvalidSamplingParam("stop_token_ids", f"holds {token}: token ids are 0 or more")
        if self.logprobs is not None and not 0 <= _int("logprobs", self.logprobs) <= MAX_LOGPROBS:
            raise InvalidSamplingParam("logprobs", f"must be from 0 to {MAX_LOGPROBS}, got {self.logprobs}")

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> SamplingParams:
        """From a request's options (JSON): unknown names refused, logit_bias keys as strings accepted."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InvalidSamplingParam(unknown[0], f"is not a sampling parameter (known: {', '.join(sorted(known))})")
        values = {k: v for k, v in options.items() if v is not None}
        if "logit_bias" in values:
            values["logit_bias"] = _token_keys(values["logit_bias"])
        if "stop_token_ids" in values:
            stop = values["stop_token_ids"]
            if not isinstance(stop, list | tuple):
                raise InvalidSamplingParam("stop_token_ids", f"must be a list of token ids, got {stop!r}")
            values["stop_token_ids"] = tuple(stop)
        return cls(**values)  # type: ignore[arg-type]

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    @property
    def penalised(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    def for_choice(self, index: int) -> SamplingParams:
        """The parameters of choice `index` of `n`: one sequence each, seed + index when seeded (vLLM's rule)."""
        return replace(self, n=1, seed=None if self.seed is None else self.seed + index)

    def check_vocab(self, vocab_size: int) -> None:
        """Refuse token ids this model does not have."""
        for name, tokens in (("logit_bias", self.logit_bias), ("stop_token_ids", self.stop_token_ids)):
            for token in tokens:
                if token >= vocab_size:
                    raise InvalidSamplingParam(name, f"names token id {token}; the model's vocabulary has {vocab_size}")


def _token_keys(bias: object) -> dict[int, float]:
    if not isinstance(bias, Mapping):
        raise InvalidSamplingParam("logit_bias", f"must map token ids to biases, got {bias!r}")
    converted: dict[int, float] = {}
    for key, value in bias.items():
        try:
            token = int(key) if isinstance(key, str) else key
        except ValueError:
            raise InvalidSamplingParam("logit_bias", f"keys are token ids, got {key!r}") from None
        converted[token] = value
    return converted


def make_generator(params: SamplingParams, device: torch.device | str = "cpu") -> torch.Generator | None:
    """The generator of a seeded sequence (None without a seed); the caller keeps it for the sequence's life."""
    if params.seed is None:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(params.seed % 2**64)
    return generator


@dataclass(slots=True)
class SamplingRow:
    """One row of a step's logits: its parameters, its tokens so far, its generator when seeded."""

    params: SamplingParams
    prompt_token_ids: Sequence[int] = ()
    output_token_ids: Sequence[int] = ()
    generator: torch.Generator | None = None


@dataclass(frozen=True, slots=True)
class SampledToken:
    """The token a row drew, with its logprob and the most likely alternatives when asked for."""

    token_id: int
    logprob: float | None = None
    top_logprobs: tuple[tuple[int, float], ...] = ()


def sample(
    logits: torch.Tensor, rows: Sequence[SamplingRow], generator: torch.Generator | None = None
) -> list[SampledToken]:
    """Draw one token per row of `logits` [batch, vocab]; `generator` serves the unseeded rows."""
    if logits.dim() != 2 or logits.shape[0] != len(rows):
        raise ValueError(f"logits of shape {list(logits.shape)} for {len(rows)} rows: expected [{len(rows)}, vocab]")
    raw = torch.log_softmax(logits.float(), dim=-1) if any(r.params.logprobs is not None for r in rows) else None
    logits = processed_logits(logits, rows)
    chosen = torch.empty(len(rows), dtype=torch.long, device=logits.device)
    greedy = [i for i, r in enumerate(rows) if r.params.greedy]
    if greedy:
        chosen[greedy] = logits[greedy].argmax(dim=-1)
    drawn = [i for i, r in enumerate(rows) if not r.params.greedy]
    if drawn:
        probs = distribution(logits[drawn], [rows[i].params for i in drawn])
        chosen[drawn] = _race(probs, [rows[i].generator for i in drawn], generator)
    return _results(chosen, raw, rows)


def processed_logits(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
    """A float copy of `logits` with each row's penalties and logit_bias applied (what greedy takes the max of)."""
    logits = logits.float().clone()
    for i, row in enumerate(rows):
        _penalise(logits[i], row)
    return logits


def _penalise(row_logits: torch.Tensor, row: SamplingRow) -> None:
    """Penalties then logit_bias, in place on one row."""
    params = row.params
    if params.penalised:
        vocab = row_logits.shape[0]
        output = torch.as_tensor(list(row.output_token_ids), dtype=torch.long, device=row_logits.device)
        if params.repetition_penalty != 1.0:
            prompt = torch.as_tensor(list(row.prompt_token_ids), dtype=torch.long, device=row_logits.device)
            seen = torch.unique(torch.cat([prompt, output]))
            values = row_logits[seen]
            penalty = params.repetition_penalty
            row_logits[seen] = torch.where(values > 0, values / penalty, values * penalty)
        if output.numel() and (params.frequency_penalty or params.presence_penalty):
            counts = torch.bincount(output, minlength=vocab).to(row_logits.dtype)
            row_logits -= params.frequency_penalty * counts + params.presence_penalty * (counts > 0)
    if params.logit_bias:
        tokens = torch.as_tensor(list(params.logit_bias), dtype=torch.long, device=row_logits.device)
        biases = torch.as_tensor(list(params.logit_bias.values()), dtype=row_logits.dtype, device=row_logits.device)
        row_logits.index_add_(0, tokens, biases)


def distribution(logits: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """Each row's probabilities to draw from: temperature, then min_p, top_k and top_p (for sampled rows)."""
    device = logits.device
    temperature = torch.tensor([p.temperature for p in params], device=device).unsqueeze(1)
    logits = logits / temperature
    min_p = torch.tensor([p.min_p for p in params], device=device).unsqueeze(1)
    if bool((min_p > 0).any()):
        probs = torch.softmax(logits, dim=-1)
        floor = min_p * probs.max(dim=-1, keepdim=True).values
        logits = logits.masked_fill(probs < floor, -math.inf)
    vocab = logits.shape[-1]
    top_k = torch.tensor([p.top_k if p.top_k > 0 else vocab for p in params], device=device).clamp(max=vocab)
    top_p = torch.tensor([p.top_p for p in params], device=device)
    if bool((top_k < vocab).any()) or bool((top_p < 1).any()):
        ordered, order = logits.sort(dim=-1, descending=True, stable=True)
        ranks = torch.arange(vocab, device=device).unsqueeze(0)
        ordered = ordered.masked_fill(ranks >= top_k.unsqueeze(1), -math.inf)
        sorted_probs = torch.softmax(ordered, dim=-1)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # the mass of the tokens ranked above
        ordered = ordered.masked_fill((before >= top_p.unsqueeze(1)) & (ranks > 0), -math.inf)
        logits = torch.full_like(logits, -math.inf).scatter(-1, order, ordered)
    return torch.softmax(logits, dim=-1)


def _race(
    probs: torch.Tensor, generators: Sequence[torch.Generator | None], default: torch.Generator | None
) -> torch.Tensor:
    """The exponential race: argmax of p / E per row, E drawn from the row's own generator when it has one."""
    noise = torch.empty_like(probs)
    unseeded = [i for i, g in enumerate(generators) if g is None]
    if unseeded:
        noise[unseeded] = torch.empty(len(unseeded), probs.shape[1], device=probs.device).exponential_(
            generator=default
        )
    for i, gen in enumerate(generators):
        if gen is not None:
            noise[i].exponential_(generator=gen)
    noise.clamp_(min=torch.finfo(noise.dtype).tiny)  # a zero draw would divide by zero
    return (probs / noise).argmax(dim=-1)


def _results(chosen: torch.Tensor, raw: torch.Tensor | None, rows: Sequence[SamplingRow]) -> list[SampledToken]:
    tokens = chosen.tolist()
    results: list[SampledToken] = []
    for i, (token, row) in enumerate(zip(tokens, rows, strict=True)):
        k = row.params.logprobs
        if k is None or raw is None:
            results.append(SampledToken(token))
            continue
        top: tuple[tuple[int, float], ...] = ()
        if k:
            values, ids = raw[i].topk(min(k, raw.shape[1]))
            top = tuple(zip(ids.tolist(), values.tolist(), strict=True))
        results.append(SampledToken(token, float(raw[i, token]), top))
    return results
