"""The model runner and the engine loop on a tiny random Llama: greedy equality with transformers' `generate`,
preemption, cancellation, prefix caching, a failing model, stop strings."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from engine.errors import InvalidArgument, LoadError
from engine.llm.engine_loop import EngineFailed, GenerationRequest, GenerationUpdate, LLMEngine
from engine.llm.kv_blocks import BlockManager
from engine.llm.model_runner import ModelRunner
from engine.llm.sampling import SamplingParams
from engine.llm.scheduler import LLMScheduler
from engine.llm.weights import find_weights
from tests.engine.llm.tiny_llama import PROMPTS

MAX_TOKENS = 24
WAIT_S = 60.0


class Collected:
    """A request's updates, and an event set at its last."""

    def __init__(self) -> None:
        self.updates: list[GenerationUpdate] = []
        self.done = threading.Event()
        self.first = threading.Event()
        self.request_id: object = None

    def __call__(self, update: GenerationUpdate) -> None:
        self.updates.append(update)
        self.first.set()
        if update.finished:
            self.done.set()

    @property
    def tokens(self) -> list[int]:
        return [t for u in self.updates for t in u.token_ids]

    @property
    def final(self) -> GenerationUpdate:
        assert self.done.wait(WAIT_S), "the request never finished"
        return self.updates[-1]


@pytest.fixture(scope="module")
def runner(tiny_llama_folder: Path) -> ModelRunner:
    return ModelRunner.load(find_weights(tiny_llama_folder))


@pytest.fixture(scope="module")
def reference(tiny_llama_folder: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_llama_folder, dtype=torch.float32).eval()


def start_engine(runner: ModelRunner, num_blocks: int = 64, block_size: int = 4, prefix: bool = True) -> LLMEngine:
    blocks = BlockManager(num_blocks, block_size, prefix)
    runner.allocate_cache(num_blocks, block_size)
    max_model_len = min(200, num_blocks * block_size)
    engine = LLMEngine(runner, LLMScheduler(blocks, 32, 8, max_model_len), "tiny", eos_token_ids=())
    engine.start()
    return engine


@pytest.fixture
def engine(runner: ModelRunner) -> Iterator[LLMEngine]:
    engine = start_engine(runner)
    yield engine
    engine.stop()


def submit(engine: LLMEngine, prompt: str, **options: object) -> Collected:
    sink = Collected()
    stop = options.pop("stop", ())
    params = SamplingParams(**{"max_tokens": MAX_TOKENS, "temperature": 0.0, **options})
    ids = engine.runner.tokenizer(prompt)["input_ids"]
    sink.request_id = engine.submit(GenerationRequest(ids, params, sink, stop=stop))
    return sink


def greedy_reference(reference: torch.nn.Module, runner: ModelRunner, prompt: str) -> list[int]:
    ids = runner.tokenizer(prompt, return_tensors="pt")["input_ids"]
    out = reference.generate(ids, max_new_tokens=MAX_TOKENS, min_new_tokens=MAX_TOKENS, do_sample=False)
    return out[0, ids.shape[1] :].tolist()


def test_greedy_output_equals_transformers_generate_for_10_prompts_in_one_batch(engine, runner, reference):
    sinks = [submit(engine, prompt) for prompt in PROMPTS]
    got = [sink.tokens for sink in sinks if sink.final]
    assert got == [greedy_reference(reference, runner, prompt) for prompt in PROMPTS]
    assert all(sink.final.finish_reason == "length" for sink in sinks)


def test_preemption_under_a_tiny_block_pool_gives_the_same_text(runner):
    roomy = start_engine(runner, num_blocks=128)
    try:
        expected = [submit(roomy, prompt) for prompt in PROMPTS[:6]]
        expected_text = ["".join(u.text for u in s.updates) for s in expected if s.final]
    finally:
        roomy.stop()
    tight = start_engine(runner, num_blocks=20)  # 80 slots for six sequences of ~35 tokens
    try:
        sinks = [submit(tight, prompt) for prompt in PROMPTS[:6]]
        texts = ["".join(u.text for u in s.updates) for s in sinks if s.final]
        assert tight.scheduler.preemptions > 0
    finally:
        tight.stop()
    assert texts == expected_text
    assert [s.tokens for s in sinks] == [s.tokens for s in expected]


def test_a_cancelled_request_frees_its_blocks_at_once(engine):
    sink = submit(engine, PROMPTS[5], max_tokens=150)
    assert sink.first.wait(WAIT_S)
    engine.cancel(sink.request_id)
    assert sink.final.finish_reason == "abort"
    assert engine.scheduler.blocks.usage == 0.0
    assert not engine.scheduler.has_work()


def test_a_prefix_cache_hit_reports_cached_tokens_and_gives_the_same_output(engine):
    prompt = PROMPTS[9]  # longer than three blocks of 4 tokens
    first = submit(engine, prompt)
    assert first.final.cached_tokens == 0
    second = submit(engine, prompt)
    assert second.final.cached_tokens >= 8
    assert second.final.cached_tokens % 4 == 0
    assert second.tokens == first.tokens
    assert engine.scheduler.stats().prefix_hits > 0


def test_stop_strings_cut_the_text_and_finish_with_stop(engine):
    whole = submit(engine, PROMPTS[0])
    assert whole.final.finish_reason == "length"
    text = "".join(u.text for u in whole.updates)
    stop = next(text[i : i + 2] for i in range(len(text) // 3, len(text)) if text[i : i + 2].isalpha())
    cut = submit(engine, PROMPTS[0], stop=[stop])
    assert cut.final.finish_reason == "stop"
    assert "".join(u.text for u in cut.updates) == text[: text.find(stop)]
    assert engine.scheduler.blocks.usage == 0.0


def test_a_seeded_sampled_request_repeats_whatever_the_batch(engine):
    alone = submit(engine, PROMPTS[1], temperature=1.0, seed=7)
    alone_tokens = alone.tokens if alone.final else []
    crowd = [submit(engine, prompt, temperature=1.0) for prompt in PROMPTS[2:6]]
    again = submit(engine, PROMPTS[1], temperature=1.0, seed=7)
    assert again.final and all(s.final for s in crowd)
    assert again.tokens == alone_tokens


def test_a_prompt_longer_than_max_model_len_is_refused_by_its_own_error(engine):
    sink = Collected()
    engine.submit(GenerationRequest(list(range(5, 205)), SamplingParams(max_tokens=4), sink))
    assert isinstance(sink.final.error, InvalidArgument)
    assert "max_model_len" in str(sink.final.error)


def test_a_failing_model_fails_its_requests_and_its_engine_not_the_process(runner, monkeypatch):
    engine = start_engine(runner)
    try:
        monkeypatch.setattr(runner, "execute", lambda plan: (_ for _ in ()).throw(RuntimeError("kernel exploded")))
        sink = submit(engine, PROMPTS[0])
        assert isinstance(sink.final.error, EngineFailed)
        assert "kernel exploded" in str(sink.final.error)
        engine.stop()
        assert not engine.alive
        with pytest.raises(EngineFailed, match="kernel exploded"):
            submit(engine, PROMPTS[1])
    finally:
        engine.stop()


def test_pickled_weights_are_refused_before_anything_loads(tiny_llama_folder, tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_bytes((tiny_llama_folder / name).read_bytes())
    (folder / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(LoadError, match="pickled weights"):
        find_weights(folder)


def test_a_version_folder_without_weights_names_what_it_needs(tmp_path):
    with pytest.raises(LoadError, match=r"no \.gguf file and no Hugging Face folder"):
        find_weights(tmp_path)


def test_bfloat16_weights_and_cache_generate_too(tiny_llama_folder):
    runner = ModelRunner.load(find_weights(tiny_llama_folder), dtype="bfloat16")
    assert runner.dtype == torch.bfloat16
    engine = start_engine(runner)
    try:
        sinks = [submit(engine, prompt) for prompt in PROMPTS[:3]]
        assert all(sink.final.completion_tokens == MAX_TOKENS for sink in sinks)
    finally:
        engine.stop()
    assert runner.cache.key[0].dtype == torch.bfloat16


def test_an_unknown_dtype_is_refused_naming_the_parameter(tiny_llama_folder):
    with pytest.raises(LoadError, match="parameter 'dtype' must be one of float32, bfloat16, float16"):
        ModelRunner.load(find_weights(tiny_llama_folder), dtype="int4")
