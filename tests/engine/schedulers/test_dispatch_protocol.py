"""The Dispatcher protocol: every scheduler a model version drives follows it, and lifecycle asks nothing else."""

from __future__ import annotations

import ast
import asyncio
import inspect
from pathlib import Path

import pytest

from engine.config.model_config import ModelConfig, SequenceBatching, TensorConfig
from engine.ensembles.dispatcher import EnsembleDispatcher
from engine.ensembles.plan import EnsemblePlan
from engine.errors import ModelNotFound
from engine.schedulers.batcher import PendingRequest
from engine.schedulers.dispatcher import Dispatcher, DynamicDispatcher
from engine.schedulers.sequence_dispatcher import SequenceDispatcher
from engine.serving.stats import ModelStats
from engine.types import InferenceRequest

DISPATCHERS = [DynamicDispatcher, SequenceDispatcher, EnsembleDispatcher]
PROTOCOL_MEMBERS = ["queued", "start", "stop", "submit", "composes", "recheck", "live_sequences", "knows"]
TENSORS = {"input": [TensorConfig("INPUT0", "TYPE_FP32", [1])], "output": [TensorConfig("OUTPUT0", "TYPE_FP32", [1])]}


def _dynamic() -> DynamicDispatcher:
    return DynamicDispatcher("plain", 1, ModelConfig(name="plain", **TENSORS), [], ModelStats("plain", 1), cores=2)


def _sequence() -> SequenceDispatcher:
    config = ModelConfig(name="counter", sequence_batching=SequenceBatching(), **TENSORS)
    return SequenceDispatcher("counter", 1, config, [], ModelStats("counter", 1))


def _ensemble_config() -> ModelConfig:
    step = {"model_name": "plain", "input_map": {"INPUT0": "INPUT0"}, "output_map": {"OUTPUT0": "OUTPUT0"}}
    return ModelConfig(name="pipeline", platform="ensemble", ensemble_scheduling={"step": [step]}, **TENSORS)


def _ensemble() -> EnsembleDispatcher:
    async def infer(request):  # pragma: no cover - no request is run here
        raise AssertionError

    return EnsembleDispatcher(EnsemblePlan(_ensemble_config()), 1, infer, ModelStats("pipeline", 1))


@pytest.mark.parametrize("dispatcher_class", DISPATCHERS)
def test_it_is_followed_by_every_dispatcher_with_its_signatures(dispatcher_class):
    assert Dispatcher in dispatcher_class.__mro__
    assert not dispatcher_class.__abstractmethods__  # start, stop, submit and queued are its own
    for name in PROTOCOL_MEMBERS:
        wanted, given = getattr(Dispatcher, name), getattr(dispatcher_class, name)
        if callable(wanted):
            assert list(inspect.signature(given).parameters) == list(inspect.signature(wanted).parameters), name
            assert inspect.iscoroutinefunction(given) == inspect.iscoroutinefunction(wanted) or name == "submit"


@pytest.mark.parametrize("make", [_dynamic, _sequence, _ensemble])
def test_it_is_satisfied_by_each_dispatcher_instance(make):
    dispatcher = make()
    assert isinstance(dispatcher, Dispatcher)
    assert dispatcher.queued == 0
    assert dispatcher.live_sequences == 0
    assert not dispatcher.knows(7)


def test_it_answers_for_a_scheduler_without_sequences_or_composing_models():
    dispatcher = _dynamic()
    assert dispatcher.composes is False
    assert dispatcher.recheck(lambda name, version: ModelConfig(name=name)) is None


async def test_it_ends_sequences_at_once_where_none_can_live():
    await _dynamic().sequences_ended()
    await _ensemble().sequences_ended()


async def test_it_knows_the_sequences_live_on_a_sequence_dispatcher():
    dispatcher = _sequence()
    assert dispatcher.composes is False
    request = InferenceRequest("counter", {}, sequence_id=7, sequence_start=True)
    future = asyncio.get_running_loop().create_future()
    dispatcher.batcher.add(PendingRequest(request=request, future=future, enqueue_ns=0), 0, None)
    assert dispatcher.live_sequences == 1 and dispatcher.knows(7) and not dispatcher.knows(8)


def test_it_rechecks_an_ensemble_against_its_composing_models():
    dispatcher = _ensemble()
    assert dispatcher.composes is True

    def missing(name, version):
        raise ModelNotFound(f"'{name}' is not found")

    assert "needs model 'plain', which is not loaded" in dispatcher.recheck(missing)
    assert dispatcher.recheck(lambda name, version: ModelConfig(name=name, **TENSORS)) is None
    assert dispatcher.labels is None and dispatcher.plan.config.decoupled is False


def test_it_leaves_lifecycle_without_isinstance_on_dispatchers():
    source = (Path(__file__).parents[3] / "engine" / "serving" / "lifecycle.py").read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
            assert "Dispatcher" not in ast.unparse(node.args[1]), ast.unparse(node)
