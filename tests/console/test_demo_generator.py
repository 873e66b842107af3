"""The demo generator: training beats guessing, and the continuous batcher steps sequences together exactly as it
would step each alone (greedy and seeded), lets them join and leave between steps, and honours stop strings,
max_tokens, a full context and cancellation. The served model.py runs in the engine's python backend."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from console.demo.generator import GENERATOR_CONFIG, model_source, train_generator, write_generator
from console.demo.generator_core import (
    FINISH_CANCELLED,
    FINISH_LENGTH,
    FINISH_STOP,
    CharTokenizer,
    CharTransformer,
    ContinuousBatcher,
    ModelShape,
    Sampling,
    Sequence,
    sampling_from,
)

GREEDY = Sampling(max_tokens=24, temperature=0)
PROMPTS = ["The ", "", "def f(x):\n    return", "A" * 200, "import os"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread, as the served model runs: on busy cores more threads spin instead of computing."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model() -> CharTransformer:
    """An untrained model: what batching must preserve does not depend on what the weights say."""
    torch.manual_seed(3)
    return CharTransformer(ModelShape()).to(torch.float64).eval()


class Recorder:
    """The batcher's emit callback: every piece of text and finish reason, per client."""

    def __init__(self) -> None:
        self.pieces: dict[object, list[str]] = {}
        self.reasons: dict[object, str] = {}

    def __call__(self, sequence: Sequence, text: str, reason: str | None) -> None:
        assert sequence.client not in self.reasons, "nothing is emitted after a sequence finished"
        self.pieces.setdefault(sequence.client, []).append(text)
        if reason is not None:
            self.reasons[sequence.client] = reason

    def text(self, client: object) -> str:
        return "".join(self.pieces.get(client, []))


def batcher_for(model: CharTransformer, **options) -> tuple[ContinuousBatcher, Recorder]:
    recorder = Recorder()
    return ContinuousBatcher(model, CharTokenizer(), recorder, **options), recorder


def run(batcher: ContinuousBatcher) -> list[int]:
    """Step until nothing is left; the sequences each step fed."""
    counts = []
    while count := batcher.step():
        counts.append(count)
    return counts


def alone(model: CharTransformer, prompt: str, sampling: Sampling = GREEDY) -> tuple[str, str]:
    batcher, recorder = batcher_for(model)
    batcher.submit(Sequence("only", prompt, sampling))
    run(batcher)
    return recorder.text("only"), recorder.reasons["only"]


def test_it_trains_to_a_loss_well_below_guessing():
    trained, report = train_generator(steps=30, seconds=None)
    assert report.steps == 30
    assert report.uniform_loss == pytest.approx(np.log(CharTokenizer().size))
    assert report.loss < 0.7 * report.uniform_loss
    again, _ = train_generator(steps=2, seconds=None)
    first, _ = train_generator(steps=2, seconds=None)
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), first.state_dict().values(), strict=True))
    assert isinstance(trained, CharTransformer)


def test_it_generates_the_same_text_every_time_at_temperature_zero(model):
    text, reason = alone(model, "The ")
    assert (text, reason) == alone(model, "The ")
    assert len(text) == GREEDY.max_tokens and reason == FINISH_LENGTH


def test_a_batch_gives_each_sequence_exactly_what_it_gets_alone(model):
    seeded = Sampling(max_tokens=30, temperature=0.9, top_p=0.9, seed=7)
    # the short one first: when it leaves, the last running sequence moves into its cache slot
    cases = (
        [("The ", Sampling(max_tokens=5, temperature=0))]
        + [(prompt, GREEDY) for prompt in PROMPTS]
        + [
            ("x = ", seeded),
            ("def ", Sampling(max_tokens=12, temperature=1.3, top_p=0.5, seed=3)),  # sampled in the same pass
        ]
    )
    expected = [alone(model, prompt, sampling) for prompt, sampling in cases]
    batcher, recorder = batcher_for(model)
    for index, (prompt, sampling) in enumerate(cases):
        batcher.submit(Sequence(index, prompt, sampling))
    counts = run(batcher)
    assert [(recorder.text(index), recorder.reasons[index]) for index in range(len(cases))] == expected
    assert counts[0] == len(cases) and max(counts) == len(cases)  # one forward pass fed them all
    assert batcher.steps == len(counts) == 30 and batcher.sequence_steps == sum(counts)


def test_new_sequences_join_at_the_next_step_and_finished_ones_leave(model):
    batcher, recorder = batcher_for(model)
    batcher.submit(Sequence("long", "The ", Sampling(max_tokens=6, temperature=0)))
    assert [batcher.step(), batcher.step()] == [1, 1]
    batcher.submit(Sequence("short", "def ", Sampling(max_tokens=2, temperature=0)))
    assert [sequence.client for sequence in batcher.running] == ["long"]
    assert [batcher.step(), batcher.step()] == [2, 2]
    assert [sequence.client for sequence in batcher.running] == ["long"]  # "short" left at its last token
    assert run(batcher) == [1, 1]
    assert (recorder.text("long"), recorder.text("short")) == (
        alone(model, "The ", Sampling(max_tokens=6, temperature=0))[0],
        alone(model, "def ", Sampling(max_tokens=2, temperature=0))[0],
    )


def test_one_at_a_time_when_batching_is_off(model):
    batcher, recorder = batcher_for(model, max_sequences=1)
    for client in ("a", "b"):
        batcher.submit(Sequence(client, "The ", Sampling(max_tokens=3, temperature=0)))
    assert run(batcher) == [1] * 6
    assert recorder.text("a") == recorder.text("b") == alone(model, "The ", Sampling(max_tokens=3, temperature=0))[0]


def test_it_stops_at_the_first_stop_string_and_leaves_it_out(model):
    long = Sampling(max_tokens=40, temperature=0)
    text, _ = alone(model, "The ", long)
    stop = text[12:15]
    cut = text.find(stop)
    batcher, recorder = batcher_for(model)
    batcher.submit(Sequence("stopped", "The ", Sampling(max_tokens=40, temperature=0, stop=("never", stop))))
    run(batcher)
    assert recorder.text("stopped") == text[:cut] and recorder.reasons["stopped"] == FINISH_STOP
    assert all(stop not in piece for piece in recorder.pieces["stopped"])  # no piece leaked the stop string


def test_it_honours_max_tokens_and_a_full_context(model):
    text, reason = alone(model, "The ", Sampling(max_tokens=7, temperature=0))
    assert len(text) == 7 and reason == FINISH_LENGTH
    batcher, recorder = batcher_for(model)
    sequence = Sequence("full", "y" * 300, Sampling(max_tokens=100, temperature=0))
    batcher.submit(sequence)
    run(batcher)
    context = model.shape.context
    assert sequence.prompt_tokens == context - context // 2  # the prompt's end, leaving half the context
    assert len(recorder.text("full")) == context - sequence.prompt_tokens + 1 < 100
    assert recorder.reasons["full"] == FINISH_LENGTH


def test_a_cancelled_sequence_leaves_the_batch(model):
    cancelled: set[str] = set()
    batcher, recorder = batcher_for(model)
    for client in ("kept", "dropped"):
        batcher.submit(Sequence(client, "The ", GREEDY, is_cancelled=lambda c=client: c in cancelled))
    assert batcher.step() == 2
    cancelled.add("dropped")
    assert batcher.step() == 1
    assert [sequence.client for sequence in batcher.running] == ["kept"]
    assert recorder.reasons["dropped"] == FINISH_CANCELLED and len(recorder.text("dropped")) == 1
    run(batcher)
    assert recorder.text("kept") == alone(model, "The ")[0]


def test_a_seed_makes_sampling_repeatable(model):
    def sampled(seed: int) -> str:
        return alone(model, "The ", Sampling(max_tokens=30, temperature=1.0, seed=seed))[0]

    assert sampled(11) == sampled(11)
    assert sampled(11) != sampled(12)


def test_it_reads_vllm_style_settings():
    sampling = sampling_from({"max_tokens": "12", "temperature": "0.5", "top_p": 0.9, "seed": 3, "stop": "\n"})
    assert sampling == Sampling(max_tokens=12, temperature=0.5, top_p=0.9, seed=3, stop=("\n",))
    assert sampling_from({"stop": ["a", "b"], "ignore_eos": True}).stop == ("a", "b")
    for bad, message in [
        ({"max_tokens": 0}, "max_tokens must be at least 1"),
        ({"temperature": "hot"}, "temperature must be a number"),
        ({"top_p": 0}, r"top_p must be in \(0, 1\]"),
        ({"stop": 5}, "stop must be a string or a list of strings"),
        ({"stop": [""]}, "stop must hold non-empty strings"),
    ]:
        with pytest.raises(ValueError, match=message):
            sampling_from(bad)


def test_the_served_model_is_one_file_declared_for_the_openai_endpoints():
    source = model_source()
    compile(source, "model.py", "exec")
    assert "from console" not in source and "import console" not in source
    assert "class TritonPythonModel" in source and "class ContinuousBatcher" in source
    for line in (
        'key: "openai_text_input" value: { string_value: "text_input" }',
        'key: "openai_text_output" value: { string_value: "text_output" }',
        "model_transaction_policy { decoupled: true }",
    ):
        assert line in GENERATOR_CONFIG


# ---- the model.py in the engine's python backend (its own stub process)


@contextlib.asynccontextmanager
async def serving(repo: Path, model: CharTransformer, config: str = GENERATOR_CONFIG):
    from engine.serving.server import InferenceServer
    from engine.settings import EngineSettings

    write_generator(repo, model, config)  # float64 weights: the served model computes exactly as `model`
    server = InferenceServer(repo, gpu_count=0, settings=EngineSettings())
    await server.start(load_models=True)
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def engine(tmp_path, model):
    async with serving(tmp_path / "repo", model) as server:
        yield server


async def answers(engine, request) -> list:
    """Every response of a request's stream (a guard turns a lost final flag into a failure, not a hang)."""
    responses = []

    async def read() -> None:
        async for response in await engine.infer_stream(request):
            responses.append(response)

    try:
        await asyncio.wait_for(read(), timeout=120)
    except TimeoutError:
        pytest.fail(f"the stream never ended; it answered {responses}")
    return responses


def generate(prompt: str, parameters: dict | None = None, **inputs):
    from engine.types import InferenceRequest

    tensors = {"text_input": np.array([prompt.encode()], dtype=np.object_)}
    kinds = {"stream": np.bool_, "max_tokens": np.int32, "temperature": np.float32, "seed": np.int64}
    for name, value in inputs.items():
        if name == "sampling_parameters":
            tensors[name] = np.array([json.dumps(value).encode()], dtype=np.object_)
        else:
            tensors[name] = np.array([value], dtype=kinds[name])
    return InferenceRequest("text_generator", tensors, parameters=parameters or {})


def step_counts(engine) -> tuple[float, float]:
    """The served model's steps and sequence-steps, from its custom metrics."""
    labels = {"model": "text_generator", "version": "1"}
    metrics = engine.custom_metrics
    return metrics.value("text_generator_steps_total", labels), metrics.value(
        "text_generator_sequence_steps_total", labels
    )


async def test_the_served_model_streams_tokens_then_the_final_flag(engine, model):
    responses = await answers(engine, generate("The ", stream=True, max_tokens=10, temperature=0.0))
    pieces = [r.outputs["text_output"][0].decode() for r in responses if r.outputs]
    assert "".join(pieces) == alone(model, "The ", Sampling(max_tokens=10, temperature=0))[0]
    assert len(pieces) == 10 and responses[-1].final and not any(r.final for r in responses[:-1])

    settings = {"max_tokens": "10", "temperature": 0, "stop": pieces[4]}
    (answer,) = await answers(engine, generate("The ", sampling_parameters=settings))
    cut = "".join(pieces).find(pieces[4])
    assert answer.final and answer.outputs["text_output"][0].decode() == "".join(pieces)[:cut]

    refused = await answers(engine, generate("The ", temperature=-1.0))
    assert refused[-1].final and "temperature must be 0 or more" in refused[-1].error.message

    steps, fed = step_counts(engine)
    assert fed == 10 + cut + 1 and 1 <= steps <= fed  # one sequence-step per generated token


async def test_the_served_model_steps_one_sequence_at_a_time_when_batching_is_off(tmp_path, model):
    serial = GENERATOR_CONFIG.replace(
        'key: "continuous_batching" value: { string_value: "true" }',
        'key: "continuous_batching" value: { string_value: "false" }',
    )
    assert serial != GENERATOR_CONFIG
    prompts = ["The ", "def ", "x"]
    async with serving(tmp_path / "repo", model, serial) as engine:
        # settings as request parameters, as the OpenAI endpoints send them
        requests = [generate(prompt, {"max_tokens": 6, "temperature": 0}, stream=True) for prompt in prompts]
        streams = await asyncio.gather(*(answers(engine, request) for request in requests))
        texts = ["".join(r.outputs["text_output"][0].decode() for r in stream if r.outputs) for stream in streams]
        assert texts == [alone(model, prompt, Sampling(max_tokens=6, temperature=0))[0] for prompt in prompts]
        assert step_counts(engine) == (18, 18)
