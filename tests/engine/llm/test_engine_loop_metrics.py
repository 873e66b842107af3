"""The engine loop's request metrics on an explicit clock, its steps driven by the test (no thread, no sleep): queue
time, time to first token, inter-token and end-to-end latency where they happen, tokens counted, ends by reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.llm.engine_loop import GenerationRequest, GenerationUpdate, LLMEngine
from engine.llm.kv_blocks import BlockManager
from engine.llm.model_runner import ModelRunner
from engine.llm.sampling import SamplingParams
from engine.llm.scheduler import LLMScheduler
from engine.llm.weights import find_weights
from tests.engine.llm.tiny_llama import PROMPTS


class Clock:
    """The engine's clock: the test sets the time."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def runner(tiny_llama_folder: Path) -> ModelRunner:
    return ModelRunner.load(find_weights(tiny_llama_folder))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def engine(runner: ModelRunner, clock: Clock) -> LLMEngine:
    """An engine whose loop thread never starts: the test takes its turns (`intake`, `step`)."""
    blocks = BlockManager(64, 4)
    runner.allocate_cache(64, 4)
    return LLMEngine(runner, LLMScheduler(blocks, 16, 2, 200), "tiny", eos_token_ids=(), clock=clock)


def submit(engine: LLMEngine, prompt: str, max_tokens: int, updates: list[GenerationUpdate] | None = None) -> int:
    ids = engine.runner.tokenizer(prompt)["input_ids"]
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    sink = updates.append if updates is not None else (lambda update: None)
    return engine.submit(GenerationRequest(ids, params, sink))


def turn(engine: LLMEngine, clock: Clock, at: float) -> None:
    clock.now = at
    engine.intake()
    engine.step()


def test_it_measures_queue_time_first_token_gaps_and_the_whole_request(engine, clock):
    submit(engine, PROMPTS[0], max_tokens=3)  # arrives at 100.0
    clock.now = 100.5
    engine.intake()  # admitted now, not yet scheduled: still queued
    assert engine.metrics().waiting == 1 and engine.metrics().queue_time.count == 0
    turn(engine, clock, 101.0)  # the whole prompt in one step: scheduled and first token at 101.0
    reading = engine.metrics()
    assert (reading.queue_time.count, reading.queue_time.sum) == (1, 1.0)
    assert (reading.ttft.count, reading.ttft.sum) == (1, 1.0)
    assert reading.running == 1 and reading.kv_usage > 0
    turn(engine, clock, 101.25)
    turn(engine, clock, 101.75)  # the third token: max_tokens
    reading = engine.metrics()
    assert reading.itl.count == 2 and reading.itl.sum == pytest.approx(0.75)
    bucket = reading.itl.bounds.index
    assert reading.itl.counts[bucket(0.3)] == 1 and reading.itl.counts[bucket(0.5)] == 1  # 0.5 s: le="0.5"
    assert (reading.e2e.count, reading.e2e.sum) == (1, 1.75)
    assert reading.finished == {"length": 1}
    assert reading.generation_tokens == 3
    assert reading.prompt_tokens == len(engine.runner.tokenizer(PROMPTS[0])["input_ids"])
    assert (reading.running, reading.waiting, reading.kv_usage) == (0, 0, 0.0)


def test_a_request_queued_behind_a_full_batch_counts_its_wait(engine, clock):
    for prompt in PROMPTS[:3]:  # max_num_seqs is 2: the third waits for a seat
        submit(engine, prompt, max_tokens=2)
    turn(engine, clock, 100.0)
    assert (engine.metrics().running, engine.metrics().waiting) == (2, 1)
    turn(engine, clock, 100.1)  # the first two finish
    turn(engine, clock, 100.4)  # the third is scheduled
    reading = engine.metrics()
    assert reading.queue_time.count == 3 and reading.queue_time.sum == pytest.approx(0.4)
    assert reading.ttft.sum == pytest.approx(0.0 + 0.0 + 0.4)


def test_a_cancelled_request_counts_as_aborted_not_in_the_end_to_end_latency(engine, clock):
    updates: list[GenerationUpdate] = []
    request_id = submit(engine, PROMPTS[5], max_tokens=50, updates=updates)
    turn(engine, clock, 100.2)  # its prompt is longer than the step's 16 tokens: a first chunk, no token yet
    engine.cancel(request_id)
    clock.now = 100.3
    engine.intake()
    assert updates[-1].finish_reason == "abort"
    reading = engine.metrics()
    assert reading.finished == {"abort": 1}
    assert reading.e2e.count == 0 and reading.ttft.count == 0 and reading.queue_time.count == 1
    assert (reading.running, reading.kv_blocks_used) == (0, 0)


def test_a_repeated_prompt_counts_its_prefix_cache_hits_in_tokens(engine, clock):
    prompt = PROMPTS[9]  # longer than three blocks of 4 tokens
    submit(engine, prompt, max_tokens=1)
    turn(engine, clock, 100.0)  # two chunks of a 16-token step
    turn(engine, clock, 100.1)
    submit(engine, prompt, max_tokens=1)
    turn(engine, clock, 100.2)  # its cached blocks are not computed again: one step
    reading = engine.metrics()
    length = len(engine.runner.tokenizer(prompt)["input_ids"])
    assert reading.prefix_queries == 2 * length
    assert reading.prefix_hits >= 8 and reading.prefix_hits % 4 == 0
    assert reading.prefix_hit_rate == pytest.approx(reading.prefix_hits / (2 * length))
    assert reading.finished == {"length": 2} and reading.e2e.count == 2
