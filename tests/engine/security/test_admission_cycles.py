"""Ensembles that call themselves (issue 32, high 1): refused with the cycle named, and a stored cycle never takes the
engine down: it starts, serves everything else, and marks the members of the cycle UNAVAILABLE with the reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.config.text_format import parse_config_json
from engine.ensembles.plan import ensemble_cycle
from engine.errors import InvalidArgument, LoadError
from engine.serving import admission
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings
from engine.types import InferenceRequest
from tests.engine.ensembles.test_ensembles import step, write_ensemble
from tests.engine.model_factory import make_simple_onnx

PASS = [step("simple", {"INPUT0": "X", "INPUT1": "X"}, {"OUTPUT0": "Y"})]


def calling(model: str) -> list[str]:
    return [step(model, {"X": "X"}, {"Y": "Y"})]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """`simple`, an ensemble over it, one ensemble naming itself and two naming each other."""
    make_simple_onnx(tmp_path)
    write_ensemble(tmp_path, "adds", ["X"], ["Y"], PASS)
    write_ensemble(tmp_path, "itself", ["X"], ["Y"], calling("itself"))
    write_ensemble(tmp_path, "ping", ["X"], ["Y"], calling("pong"))
    write_ensemble(tmp_path, "pong", ["X"], ["Y"], calling("ping"))
    return tmp_path


async def started(repo: Path) -> InferenceServer:
    server = InferenceServer(repo, gpu_count=0, settings=EngineSettings(open_repository_control=True))
    await server.start()
    return server


def test_it_names_the_chain_of_a_cycle():
    graph = {"a": ["b"], "b": ["c", "a"], "c": []}
    x = parse_config_json({"name": "x", "platform": "ensemble", "ensemble_scheduling": {"step": [{"model_name": "a"}]}})
    with pytest.raises(InvalidArgument, match="ensemble 'x' -> 'a' -> 'b' -> 'x' is a cycle"):
        admission.check_ensemble_cycle("x", [x], lambda m: {"a": ["b"], "b": ["x"]}.get(m, []))
    admission.check_ensemble_cycle("x", [x], lambda m: {"a": ["b"], "b": ["a"]}.get(m, []))  # not through x
    assert ensemble_cycle("a", lambda m: graph[m]) == ["a", "b", "a"]


async def test_it_starts_serving_the_rest_when_stored_ensembles_call_themselves(repo):
    server = await started(repo)
    try:
        assert server.is_ready()
        batch = np.arange(16, dtype=np.int32).reshape(1, 16)
        response = await server.infer(InferenceRequest(model_name="adds", inputs={"X": batch}, batch_size=1))
        np.testing.assert_array_equal(response.outputs["Y"], 2 * batch)
        index = {row["name"]: row for row in server.repository_index()}
        assert index["itself"]["state"] == "UNAVAILABLE"
        assert "ensemble 'itself' -> 'itself' is a cycle" in index["itself"]["reason"]
        assert "ensemble 'ping' -> 'pong' -> 'ping' is a cycle" in index["ping"]["reason"]
        assert "ensemble 'pong' -> 'ping' -> 'pong' is a cycle" in index["pong"]["reason"]
    finally:
        await server.stop()


async def test_it_refuses_a_load_whose_config_closes_a_cycle_and_keeps_serving(repo):
    write_ensemble(repo, "back", ["X"], ["Y"], calling("adds"))  # back -> adds -> simple: no cycle yet
    server = await started(repo)
    try:
        assert server.model_ready("back")
        closing = {"ensemble_scheduling": {"step": [{"model_name": "back", "input_map": {"X": "X"}}]}}
        closing["ensemble_scheduling"]["step"][0]["output_map"] = {"Y": "Y"}
        with pytest.raises(LoadError, match="ensemble 'adds' -> 'back' -> 'adds' is a cycle"):
            await server.load_model("adds", config=closing)
        assert server.model_ready("adds") and server.model_ready("back")  # what served before still serves
    finally:
        await server.stop()


async def test_its_loads_of_composing_models_end_even_when_the_cycle_check_is_bypassed(repo, monkeypatch):
    monkeypatch.setattr(admission, "check_ensemble_cycle", lambda *args: None)  # a cycle stored and unchecked
    server = await started(repo)
    try:
        assert server.is_ready() and server.model_ready("adds")
        assert not server.model_ready("ping") and not server.model_ready("itself")
    finally:
        await server.stop()


async def test_a_model_that_breaks_the_load_unexpectedly_fails_alone_at_start_up(repo, monkeypatch):
    real = InferenceServer._load_model

    async def broken(self, name, **kwargs):
        if name == "itself":
            raise RecursionError("maximum recursion depth exceeded")
        return await real(self, name, **kwargs)

    monkeypatch.setattr(InferenceServer, "_load_model", broken)
    server = await started(repo)
    try:
        assert server.is_ready() and server.model_ready("adds")
        index = {row["name"]: row for row in server.repository_index()}
        assert index["itself"] == {"name": "itself", "state": "UNAVAILABLE", "reason": index["itself"]["reason"]}
        assert "RecursionError" in index["itself"]["reason"]
    finally:
        await server.stop()
