"""Structured outputs: a request's answer held to a JSON schema, any JSON object, a regex, one of a list of strings
or an EBNF grammar while it is decoded, with xgrammar (its compiled grammars and token bitmasks).

Why xgrammar: its pushdown automaton fills a vocabulary's token mask in microseconds per sequence, for a whole batch
in one call (`BatchGrammarMatcher`, C++ threads), and a compiled grammar is shared by every sequence that uses it;
it has a CPU wheel for this Python and needs no CUDA. outlines builds a token-level FSM per schema (slow to compile
for large schemas, regex-only) and lm-format-enforcer walks a character parser per token in Python (slow per step).

- `StructuredOutput` is what a request asks for (vLLM's `structured_outputs`: exactly one of `json`, `json_object`,
  `regex`, `choice`, `grammar`, `structural_tag`), checked field by field; a JSON schema using a keyword xgrammar
  would not enforce (`not`, `if`, `allOf` of several, ...) is refused, naming it: nothing asked for is silently
  ignored.
- `compile_grammar(tokenizer, vocab_size, spec)` compiles one for a tokenizer (a caller's thread, never the event
  loop nor the engine's step) and caches it by (tokenizer, spec), at most CACHE_ENTRIES / CACHE_BYTES; a spec the
  library cannot compile is an InvalidArgument naming the field and the library's reason.
- `GrammarState` is one sequence's matcher: it accepts each sampled token, knows when the grammar has terminated
  (the answer ends "stop"), and is rebuilt by replaying the sequence's tokens when it missed some (`sync`).
- `mask_logits(logits, states)` fills the bitmask of every constrained row of a step in one batched call and sets
  the logits of tokens the grammar forbids to -inf; unconstrained rows are untouched.

A `structural_tag` is xgrammar's ({"type": "structural_tag", "format": ...}: tags, triggers, sequences of formats):
what tool calls are held to (engine/llm/tool_parsers.py); each JSON schema inside it is checked and compiled as a
`json` spec is, so its JSON has the same compact form.

JSON is written compactly (no free whitespace between tokens: a model cannot pad forever); `strict` (OpenAI's)
allows no properties or items beyond those the schema names, as xgrammar's strict mode.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.errors import InvalidArgument

if TYPE_CHECKING:
    import torch  # imported where it runs: the OpenAI front end checks specs here without loading torch

FIELD = "structured_outputs"
KINDS = ("json", "json_object", "regex", "choice", "grammar", "structural_tag")
CACHE_ENTRIES = 128  # compiled grammars kept, over every tokenizer
CACHE_BYTES = 256 * 2**20
MAX_CHOICES = 1024
MAX_SPEC_CHARS = 1_000_000
# JSON-schema keywords xgrammar 0.2.8 accepts but does not enforce: refused rather than silently ignored
UNENFORCED = (
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "oneOf",
    "$dynamicRef",
)
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "allOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties", "propertyNames", "additionalItems")
_LOOSE_CHARACTERS = r"[^\"\\\r\n]"
_JSON_CHARACTERS = r"[^\0-\x1f\"\\\r\n]"
_LIBRARY_PREFIX = re.compile(r"^\[[\d:]+\] \S+?:\d+: (Check failed: \(.*?\) is false: )?")


class InvalidStructuredOutput(InvalidArgument):
    """A structured-output request the grammar library cannot hold an answer to; `field` names it."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name} {message}")
        self.field = name


@dataclass(frozen=True, slots=True)
class StructuredOutput:
    """One constraint: `kind` (one of KINDS) and its text (a schema as JSON, a regex, choices as JSON, EBNF)."""

    kind: str
    spec: str
    strict: bool = False  # json: no properties or items beyond the schema's
    field: str = FIELD  # how the request named it, for errors

    @classmethod
    def from_options(cls, value: object, name: str = FIELD) -> StructuredOutput:
        """vLLM's `structured_outputs` object (or its JSON text): exactly one of KINDS, plus `strict` for json."""
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise InvalidStructuredOutput(name, "must be a JSON object") from None
        if not isinstance(value, Mapping):
            raise InvalidStructuredOutput(name, f"must be an object with one of {', '.join(KINDS)}")
        strict = value.get("strict", False)
        if not isinstance(strict, bool):
            raise InvalidStructuredOutput(f"{name}.strict", "must be true or false")
        given = [k for k in value if k != "strict"]
        unknown = [k for k in given if k not in KINDS]
        if unknown:
            raise InvalidStructuredOutput(f"{name}.{unknown[0]}", f"is not supported (supported: {', '.join(KINDS)})")
        chosen = [k for k in given if value[k] is not None and value[k] is not False]
        if len(chosen) != 1:
            raise InvalidStructuredOutput(name, f"must give exactly one of {', '.join(KINDS)}, got {len(chosen)}")
        kind = chosen[0]
        return cls.of(kind, value[kind], strict=strict, name=f"{name}.{kind}")

    @classmethod
    def of(cls, kind: str, value: object, *, strict: bool = False, name: str | None = None) -> StructuredOutput:
        """A constraint of `kind` from a request's value, checked; `name` is the field errors name."""
        name = name or kind
        if kind == "json_object":
            if value is not True:
                raise InvalidStructuredOutput(name, "must be true")
            return cls(kind, "", False, name)
        if kind == "json":
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError as exc:
                    raise InvalidStructuredOutput(name, f"is not valid JSON: {exc}") from None
            if not isinstance(value, Mapping | bool):
                raise InvalidStructuredOutput(name, "must be a JSON schema (an object)")
            _check_schema(value, name)
            return cls(kind, _bounded(name, json.dumps(value)), strict, name)
        if kind in ("regex", "grammar"):
            if not isinstance(value, str) or not value:
                raise InvalidStructuredOutput(name, "must be a non-empty string")
            return cls(kind, _bounded(name, value), False, name)
        if kind == "choice":
            if not isinstance(value, list) or not value or len(value) > MAX_CHOICES:
                raise InvalidStructuredOutput(name, f"must be a list of 1 to {MAX_CHOICES} strings")
            if not all(isinstance(c, str) and c for c in value):
                raise InvalidStructuredOutput(name, "must hold non-empty strings")
            return cls(kind, _bounded(name, json.dumps(value, ensure_ascii=False)), False, name)
        if kind == "structural_tag":
            tag = _structural_tag(value, name)
            return cls(kind, _bounded(name, json.dumps(tag, ensure_ascii=False)), strict, name)
        raise InvalidStructuredOutput(name, f"is not a kind of structured output ({', '.join(KINDS)})")

    def as_options(self) -> dict[str, Any]:
        """The `structured_outputs` object that says the same (what the OpenAI front end sends the model)."""
        value: Any = True if self.kind == "json_object" else self.spec
        if self.kind in ("json", "choice"):
            value = json.loads(self.spec)
        options = {self.kind: value}
        if self.strict:
            options["strict"] = True
        return options


def _bounded(name: str, text: str) -> str:
    if len(text) > MAX_SPEC_CHARS:
        raise InvalidStructuredOutput(name, f"is {len(text)} characters long; at most {MAX_SPEC_CHARS} are taken")
    return text


def _structural_tag(value: object, name: str) -> Mapping[str, Any]:
    """A structural tag (or its JSON text): an object of type "structural_tag" with a "format"; its JSON schemas
    checked as a `json` spec's."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise InvalidStructuredOutput(name, f"is not valid JSON: {exc}") from None
    if (
        not isinstance(value, Mapping)
        or value.get("type") != "structural_tag"
        or not isinstance(value.get("format"), Mapping)
    ):
        raise InvalidStructuredOutput(name, 'must be an object with "type": "structural_tag" and a "format" object')
    for path, schema in _tag_schemas(value["format"], "#/format"):
        _check_schema(schema, name, path)
    return value


def _tag_schemas(node: object, path: str) -> list[tuple[str, Any]]:
    """Every JSON schema a structural tag's formats hold, with where it stands."""
    if isinstance(node, list):
        return [found for index, item in enumerate(node) for found in _tag_schemas(item, f"{path}/{index}")]
    if not isinstance(node, Mapping):
        return []
    if node.get("type") == "json_schema":
        return [(f"{path}/json_schema", node.get("json_schema"))]
    return [found for key, item in node.items() for found in _tag_schemas(item, f"{path}/{key}")]


def _compact_tag(node: Any, strict: bool) -> Any:
    """A structural tag whose JSON schemas (style json) are the grammars `json_grammar` writes for them."""
    if isinstance(node, list):
        return [_compact_tag(item, strict) for item in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "json_schema" and node.get("style", "json") == "json":
        spec = StructuredOutput("json", json.dumps(node.get("json_schema")), strict)
        return {"type": "grammar", "grammar": json_grammar(spec)}
    return {key: _compact_tag(item, strict) for key, item in node.items()}


def _check_schema(schema: object, name: str, path: str = "#") -> None:
    """Refuse keywords the grammar would not enforce, naming where they stand."""
    if not isinstance(schema, Mapping):
        return
    for keyword in UNENFORCED:
        if keyword in schema:
            hint = " (use anyOf)" if keyword == "oneOf" else ""
            raise InvalidStructuredOutput(
                name, f"uses '{keyword}' at {path}, which the grammar cannot enforce{hint}: refused, not ignored"
            )
    if isinstance(schema.get("allOf"), list) and len(schema["allOf"]) > 1:
        raise InvalidStructuredOutput(
            name, f"uses 'allOf' of several schemas at {path}, which the grammar cannot enforce: merge them"
        )
    for keyword in ("unevaluatedProperties", "unevaluatedItems"):
        if keyword in schema:
            raise InvalidStructuredOutput(
                name, f"uses '{keyword}' at {path}: give 'strict': true (nothing beyond the schema) instead"
            )
    for keyword in _SCHEMA_MAPS:
        children = schema.get(keyword)
        if isinstance(children, Mapping):
            for key, child in children.items():
                _check_schema(child, name, f"{path}/{keyword}/{key}")
    for keyword in _SCHEMA_LISTS:
        children = schema.get(keyword)
        if isinstance(children, list):
            for index, child in enumerate(children):
                _check_schema(child, name, f"{path}/{keyword}/{index}")
    for keyword in _SCHEMA_VALUES:
        _check_schema(schema.get(keyword), name, f"{path}/{keyword}")


# --- compiling, cached by (tokenizer, spec) ---------------------------------------------------------------------------


class _Compilers:
    """One xgrammar compiler per tokenizer (by its vocabulary's fingerprint), and the bounded cache of grammars."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.compilers: dict[tuple[int, int], tuple[str, Any, Any]] = {}  # (id(tokenizer), vocab): fingerprint, ...
        self.grammars: OrderedDict[tuple[str, StructuredOutput], Any] = OrderedDict()
        self.bytes = 0

    def compiler(self, tokenizer: Any, vocab_size: int) -> tuple[str, Any]:
        key = (id(tokenizer), vocab_size)
        with self.lock:
            found = self.compilers.get(key)
        if found is not None and found[2] is tokenizer:
            return found[0], found[1]
        import xgrammar

        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        fingerprint = hashlib.sha256(info.serialize_json().encode()).hexdigest()
        threads = max(1, min(8, (os.cpu_count() or 2) // 2))
        compiler = xgrammar.GrammarCompiler(info, max_threads=threads, cache_enabled=False)
        with self.lock:
            self.compilers[key] = (fingerprint, compiler, tokenizer)
        return fingerprint, compiler

    def get(self, key: tuple[str, StructuredOutput]) -> Any:
        with self.lock:
            grammar = self.grammars.get(key)
            if grammar is not None:
                self.grammars.move_to_end(key)
            return grammar

    def put(self, key: tuple[str, StructuredOutput], grammar: Any) -> None:
        with self.lock:
            if key in self.grammars:
                return
            self.grammars[key] = grammar
            self.bytes += grammar.memory_size_bytes
            while len(self.grammars) > CACHE_ENTRIES or (self.bytes > CACHE_BYTES and len(self.grammars) > 1):
                _, evicted = self.grammars.popitem(last=False)
                self.bytes -= evicted.memory_size_bytes

    def clear(self) -> None:
        with self.lock:
            self.grammars.clear()
            self.bytes = 0


_COMPILERS = _Compilers()


def cached_grammars() -> int:
    """How many compiled grammars the cache holds (for tests)."""
    return len(_COMPILERS.grammars)


def compile_grammar(tokenizer: Any, vocab_size: int, spec: StructuredOutput) -> Any:
    """The compiled grammar of `spec` for this tokenizer (cached); InvalidStructuredOutput with the library's reason.

    Slow for a large schema the first time: call it on a worker thread, never on the event loop or the engine's."""
    fingerprint, compiler = _COMPILERS.compiler(tokenizer, vocab_size)
    key = (fingerprint, spec.kind, spec.spec, spec.strict)
    grammar = _COMPILERS.get(key)
    if grammar is not None:
        return grammar
    try:
        if spec.kind in ("json", "json_object"):
            grammar = compiler.compile_grammar(json_grammar(spec))
        elif spec.kind == "regex":
            grammar = compiler.compile_regex(spec.spec)
        elif spec.kind == "structural_tag":
            grammar = compiler.compile_structural_tag(json.dumps(_compact_tag(json.loads(spec.spec), spec.strict)))
        elif spec.kind == "choice":
            choices = json.loads(spec.spec)
            grammar = compiler.compile_grammar("root ::= " + " | ".join(json.dumps(c) for c in choices))
        else:
            grammar = compiler.compile_grammar(spec.spec)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise InvalidStructuredOutput(spec.field, f"cannot be compiled: {library_reason(exc)}") from None
    _COMPILERS.put(key, grammar)
    return grammar


def json_grammar(spec: StructuredOutput) -> str:
    """The EBNF of a json or json_object spec, compact, with no raw control character inside a string.

    xgrammar 0.2.8 writes the characters of a string with maxLength as `[^"\\\r\n]`, which lets a raw control
    character (U+0000 to U+001F) in, and JSON does not: they are taken out as its other strings take them out."""
    import xgrammar

    schema = spec.spec if spec.kind == "json" else '{"type": "object"}'
    grammar = xgrammar.Grammar.from_json_schema(schema, any_whitespace=False, strict_mode=spec.strict)
    return str(grammar).replace(_LOOSE_CHARACTERS, _JSON_CHARACTERS)


def library_reason(exc: BaseException) -> str:
    """xgrammar's message without its time stamp and source line."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return _LIBRARY_PREFIX.sub("", text)[:500]


# --- decoding ---------------------------------------------------------------------------------------------------------


class GrammarState:
    """One sequence's matcher over its compiled grammar; `accepted` counts the tokens it has taken."""

    def __init__(self, grammar: Any, stop_token_ids: Sequence[int] = ()) -> None:
        self.grammar = grammar
        self.stop_token_ids = list(dict.fromkeys(stop_token_ids)) or None  # None: the tokenizer's eos
        self.matcher = self._fresh()
        self.accepted = 0

    def _fresh(self) -> Any:
        import xgrammar

        return xgrammar.GrammarMatcher(self.grammar, override_stop_tokens=self.stop_token_ids)

    def sync(self, output_token_ids: Sequence[int]) -> None:
        """Match the sequence's tokens so far: a matcher that missed some is rebuilt and replays them all."""
        if self.accepted == len(output_token_ids):
            return
        self.matcher = self._fresh()
        self.accepted = 0
        for token in output_token_ids:
            if not self.accept(token):
                raise InvalidArgument(f"token {token} of the answer does not follow its grammar")

    def accept(self, token_id: int) -> bool:
        """Take a sampled token; False when the grammar forbids it."""
        if not self.matcher.accept_token(int(token_id)):
            return False
        self.accepted += 1
        return True

    @property
    def terminated(self) -> bool:
        """The grammar is complete and has taken its stop token: the answer ends here."""
        return bool(self.matcher.is_terminated())


_BATCH = threading.local()


def mask_logits(logits: torch.Tensor, states: Mapping[int, GrammarState]) -> None:
    """Set to -inf, in place, the logits of tokens each constrained row's grammar forbids now: row index -> state.

    One batched fill of every constrained row's bitmask (C++ threads), then one masked write over the batch (the
    other rows' bits allow every token, so they are untouched)."""
    if not states:
        return
    import torch
    import xgrammar

    rows = sorted(states)
    bitmask = xgrammar.allocate_token_bitmask(logits.shape[0], logits.shape[-1])  # every bit set: all allowed
    batch = getattr(_BATCH, "matcher", None)
    if batch is None:
        batch = _BATCH.matcher = xgrammar.BatchGrammarMatcher(max(1, min(8, (os.cpu_count() or 2) // 2)))
    batch.batch_fill_next_token_bitmask([states[row].matcher for row in rows], bitmask, indices=rows)
    with torch.inference_mode():  # the model's logits are inference tensors
        if logits.device.type == "cpu":
            write_mask_on_cpu(logits, bitmask, rows)
        else:
            apply_unpacked(logits, bitmask, rows)


def write_mask_on_cpu(logits: torch.Tensor, bitmask: torch.Tensor, rows: Sequence[int]) -> None:
    """The masked write on the CPU, by whichever way is cheaper for this step's bits.

    xgrammar's kernel visits each forbidden token (0.1 ms for 32 rows of SmolLM2's 49152 inside a JSON string, where
    a few hundred are forbidden, but 8.9 ms at a key, where two are allowed); unpacking the bits with numpy and one
    `torch.where` costs 1.3 ms either way. The bits' count decides (torch's shifts took 10-13 ms)."""
    import torch
    import xgrammar

    words = bitmask.numpy()
    forbidden = words.size * 32 - int(np.bitwise_count(words.view(np.uint32)).sum())
    if forbidden <= SPARSE_FORBIDDEN * words.size * 32:
        vocab = logits.shape[-1]
        xgrammar.apply_token_bitmask_inplace(logits, bitmask, vocab_size=vocab, indices=list(rows), backend="cpu")
        return
    bits = np.unpackbits(words.view(np.uint8), axis=-1, count=logits.shape[-1], bitorder="little")
    torch.where(torch.from_numpy(bits.view(np.bool_)), logits, logits.new_full((), float("-inf")), out=logits)


SPARSE_FORBIDDEN = 0.1  # the share of forbidden bits under which xgrammar's kernel is the cheaper write


def apply_unpacked(logits: torch.Tensor, bitmask: torch.Tensor, rows: Sequence[int]) -> None:
    """The same write with torch ops on the logits' device (a GPU's): the rows' bits unpacked, one masked fill."""
    import torch

    index = torch.as_tensor(rows, dtype=torch.long)
    allowed = _unpack(bitmask[index].to(logits.device), logits.shape[-1])
    index = index.to(logits.device)
    logits[index] = logits[index].masked_fill(~allowed, float("-inf"))


_BITS: dict[torch.device, torch.Tensor] = {}


def _unpack(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """[rows, ceil(vocab / 32)] int32 words as [rows, vocab] booleans (bit j of word w: token 32 w + j)."""
    import torch

    shifts = _BITS.get(bitmask.device)
    if shifts is None:
        shifts = _BITS[bitmask.device] = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1
    return bits.reshape(bitmask.shape[0], -1)[:, :vocab].bool()
