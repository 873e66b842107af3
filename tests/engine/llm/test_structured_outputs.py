"""Structured outputs in the engine on a tiny random Llama: a random model cannot write JSON by itself, so every
answer that parses is the grammar's doing. JSON schemas, any JSON object, choices and regexes over several seeds at
temperature 1.0; a constrained and a free request in the same steps; preemption; the grammar cache; refusals."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from engine.llm.engine_loop import GenerationRequest, LLMEngine
from engine.llm.model_runner import ModelRunner
from engine.llm.sampling import SamplingParams
from engine.llm.structured import (
    InvalidStructuredOutput,
    StructuredOutput,
    cached_grammars,
    compile_grammar,
)
from engine.llm.weights import find_weights
from tests.engine.llm.test_engine_loop import Collected, start_engine, submit
from tests.engine.llm.tiny_llama import PROMPTS

SEEDS = range(6)
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "role", "active"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def runner(tiny_llama_folder: Path) -> ModelRunner:
    return ModelRunner.load(find_weights(tiny_llama_folder))


@pytest.fixture
def engine(runner: ModelRunner) -> Iterator[LLMEngine]:
    engine = start_engine(runner, num_blocks=128)
    yield engine
    engine.stop()


def grammar(runner: ModelRunner, kind: str, value: object, strict: bool = False):
    return compile_grammar(runner.tokenizer, runner.shape.vocab_size, StructuredOutput.of(kind, value, strict=strict))


def constrained(engine: LLMEngine, prompt: str, compiled, max_tokens: int = 120, **options: object) -> Collected:
    sink = Collected()
    params = SamplingParams(max_tokens=max_tokens, **options)
    ids = engine.runner.tokenizer(prompt)["input_ids"]
    sink.request_id = engine.submit(GenerationRequest(ids, params, sink, grammar=compiled))
    return sink


def text_of(sink: Collected) -> str:
    assert sink.final.error is None, sink.final.error
    return "".join(update.text for update in sink.updates)


def test_it_holds_json_schema_answers_to_the_schema_for_every_seed(engine, runner):
    compiled = grammar(runner, "json", PERSON, strict=True)
    sinks = [constrained(engine, PROMPTS[seed % len(PROMPTS)], compiled, seed=seed, temperature=1.0) for seed in SEEDS]
    for sink in sinks:
        text = text_of(sink)
        assert sink.final.finish_reason == "stop", text
        jsonschema.validate(json.loads(text), PERSON)


def test_it_keeps_the_schemas_property_order(engine, runner):
    compiled = grammar(runner, "json", PERSON, strict=True)
    for seed in SEEDS[:3]:
        answer = json.loads(text_of(constrained(engine, PROMPTS[seed], compiled, seed=seed, temperature=1.0)))
        assert list(answer) == list(PERSON["properties"])  # as OpenAI answers: name, age, role, active


def test_it_answers_a_json_object_for_json_object(engine, runner):
    compiled = grammar(runner, "json_object", True)
    for seed in SEEDS:
        sink = constrained(engine, PROMPTS[seed], compiled, max_tokens=200, seed=seed, temperature=1.0)
        text = text_of(sink)
        assert sink.final.finish_reason == "stop", text
        assert isinstance(json.loads(text), dict), text


def test_it_answers_one_of_the_choices(engine, runner):
    choices = ["positive", "negative", 'say "neutral"\n']
    compiled = grammar(runner, "choice", choices)
    sinks = [constrained(engine, PROMPTS[seed], compiled, seed=seed, temperature=1.0) for seed in SEEDS]
    for sink in sinks:
        assert text_of(sink) in choices
        assert sink.final.finish_reason == "stop"


def test_it_answers_text_matching_the_regex(engine, runner):
    pattern = r"[a-z]{2,6}@[a-z]{2,6}\.(com|org)"
    compiled = grammar(runner, "regex", pattern)
    sinks = [constrained(engine, PROMPTS[seed], compiled, seed=seed, temperature=1.0) for seed in SEEDS]
    for sink in sinks:
        text = text_of(sink)
        assert re.fullmatch(pattern, text), text


def test_a_free_request_batched_with_a_constrained_one_keeps_its_greedy_text(runner):
    alone = start_engine(runner, num_blocks=128)
    try:
        expected = submit(alone, PROMPTS[1])
        expected_tokens = expected.tokens if expected.final else []
    finally:
        alone.stop()
    engine = start_engine(runner, num_blocks=128)
    try:
        compiled = grammar(runner, "json", PERSON, strict=True)
        together = [constrained(engine, PROMPTS[0], compiled, seed=7, temperature=1.0), submit(engine, PROMPTS[1])]
        assert all(sink.final for sink in together)
        steps_with_both = engine.steps
    finally:
        engine.stop()
    jsonschema.validate(json.loads(text_of(together[0])), PERSON)
    assert together[1].tokens == expected_tokens
    assert together[1].final.finish_reason == "length"
    assert steps_with_both < len(expected_tokens) + len(together[0].tokens)  # they shared steps


def test_a_preempted_constrained_sequence_keeps_its_grammar_and_its_tokens(runner):
    compiled = grammar(runner, "json", PERSON, strict=True)
    roomy = start_engine(runner, num_blocks=128)
    try:
        expected = [constrained(roomy, prompt, compiled, seed=3, temperature=1.0) for prompt in PROMPTS[:6]]
        assert all(sink.final for sink in expected)
    finally:
        roomy.stop()
    tight = start_engine(runner, num_blocks=30)  # 120 slots for six sequences of up to ~90 tokens
    try:
        sinks = [constrained(tight, prompt, compiled, seed=3, temperature=1.0) for prompt in PROMPTS[:6]]
        assert all(sink.final for sink in sinks)
        assert tight.scheduler.preemptions > 0
    finally:
        tight.stop()
    assert [sink.tokens for sink in sinks] == [sink.tokens for sink in expected]
    for sink in sinks:
        assert sink.final.finish_reason == "stop"
        jsonschema.validate(json.loads(text_of(sink)), PERSON)


def test_a_matcher_that_missed_tokens_is_rebuilt_by_replaying_them(runner):
    from engine.llm.structured import GrammarState

    compiled = grammar(runner, "choice", ["alpha", "beta"])
    tokens = runner.tokenizer("alpha", add_special_tokens=False)["input_ids"]
    state = GrammarState(compiled)
    state.sync(tokens)  # a fresh matcher after a recompute: the tokens so far replayed
    assert state.accepted == len(tokens)
    assert state.matcher.is_completed()


def test_compiled_grammars_are_cached_by_tokenizer_and_spec(runner):
    first = grammar(runner, "regex", "[0-9]{3}")
    count = cached_grammars()
    assert grammar(runner, "regex", "[0-9]{3}") is first
    assert cached_grammars() == count


@pytest.mark.parametrize(
    ("kind", "value", "reason"),
    [
        ("json", {"type": "nonsense"}, "Unsupported type"),
        ("json", {"type": "string", "minLength": 5, "maxLength": 2}, "minLength 5 is greater than maxLength 2"),
        ("regex", "(ab", "parenthesis is not closed"),
        ("grammar", "root ::= missing", 'Rule "missing" is not defined'),
    ],
)
def test_a_spec_the_library_cannot_compile_is_refused_with_its_reason(runner, kind, value, reason):
    with pytest.raises(InvalidStructuredOutput, match=re.escape(reason)) as refused:
        grammar(runner, kind, value)
    assert refused.value.field == kind
    assert "cannot be compiled" in refused.value.message
    assert "/project/" not in refused.value.message  # the library's reason, not its source file


@pytest.mark.parametrize("keyword", ["not", "if", "uniqueItems", "oneOf", "dependentRequired"])
def test_a_schema_keyword_the_grammar_would_ignore_is_refused_naming_it(keyword):
    schema = {"type": "object", "properties": {"tags": {"type": "array", keyword: {"type": "string"}}}}
    with pytest.raises(InvalidStructuredOutput, match=f"'{keyword}' at #/properties/tags"):
        StructuredOutput.of("json", schema)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({}, "exactly one of"),
        ({"json": {"type": "object"}, "regex": "a"}, "exactly one of"),
        ({"xml": "<a/>"}, "structured_outputs.xml is not supported"),
        ({"choice": []}, "a list of 1 to"),
        ({"json_object": True, "strict": "yes"}, "strict must be true or false"),
        ("{not json", "must be a JSON object"),
    ],
)
def test_a_malformed_structured_outputs_value_is_refused_naming_its_field(value, message):
    with pytest.raises(InvalidStructuredOutput, match=re.escape(message)):
        StructuredOutput.from_options(value)


def test_the_mask_touches_only_the_constrained_rows_and_their_forbidden_tokens(runner):
    import torch

    from engine.llm.structured import GrammarState, mask_logits

    vocab = runner.shape.vocab_size
    compiled = grammar(runner, "choice", ["alpha", "beta"])
    logits = torch.randn(3, vocab)
    before = logits.clone()
    mask_logits(logits, {1: GrammarState(compiled)})
    assert torch.equal(logits[0], before[0]) and torch.equal(logits[2], before[2])
    allowed = torch.isfinite(logits[1])
    assert 0 < int(allowed.sum()) < vocab
    assert torch.equal(logits[1][allowed], before[1][allowed])
    first = {runner.tokenizer.decode([token]) for token in allowed.nonzero().flatten().tolist()}
    assert all("alpha".startswith(text) or "beta".startswith(text) for text in first), first


def test_it_masks_the_same_tokens_on_the_cpu_as_with_torch_ops(runner):
    import torch
    import xgrammar

    from engine.llm.structured import GrammarState, apply_unpacked, mask_logits

    vocab = runner.shape.vocab_size
    states = {0: GrammarState(grammar(runner, "json", PERSON)), 2: GrammarState(grammar(runner, "regex", "[a-c]+"))}
    logits = torch.randn(4, vocab)
    on_cpu, by_torch = logits.clone(), logits.clone()
    mask_logits(on_cpu, states)
    bitmask = xgrammar.allocate_token_bitmask(4, vocab)
    for row, state in states.items():
        state.matcher.fill_next_token_bitmask(bitmask, row)
    apply_unpacked(by_torch, bitmask, sorted(states))
    assert torch.equal(on_cpu, by_torch)
    assert torch.equal(on_cpu[1], logits[1]) and torch.equal(on_cpu[3], logits[3])
    assert all(0 < int(torch.isfinite(on_cpu[row]).sum()) < vocab for row in states)


@pytest.mark.parametrize("forbidden_share", [0.02, 0.5, 0.98])
def test_it_writes_the_mask_on_the_cpu_by_either_way_exactly(forbidden_share):
    import numpy as np
    import torch

    from engine.llm.structured import apply_unpacked, write_mask_on_cpu

    vocab = 1000
    forbidden = torch.rand(3, vocab, generator=torch.Generator().manual_seed(0)) < forbidden_share
    forbidden[1] = False  # an unconstrained row: its bits allow every token
    allowed = np.ones((3, 1024), dtype=bool)  # the padding's bits are set, as xgrammar allocates them
    allowed[:, :vocab] = ~forbidden.numpy()
    bitmask = torch.from_numpy(np.packbits(allowed, axis=-1, bitorder="little").view(np.int32))
    logits = torch.randn(3, vocab)
    on_cpu, by_torch = logits.clone(), logits.clone()
    write_mask_on_cpu(on_cpu, bitmask, [0, 2])
    apply_unpacked(by_torch, bitmask, [0, 2])
    assert torch.equal(on_cpu, by_torch)
    assert bool(torch.isneginf(on_cpu[forbidden]).all())
    assert torch.equal(on_cpu[~forbidden], logits[~forbidden])
