"""Ensembles in the engine: steps over real ONNX models, concurrent branches, validation, lifecycle across models."""

from __future__ import annotations

import asyncio
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

from engine.errors import InferaError, Unavailable
from engine.serving.model_status import ModelState
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings
from engine.types import InferenceRequest
from tests.engine.model_factory import make_simple_onnx

A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)


def step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    maps = "".join(f' input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += "".join(f' output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: {version}{maps} }}'


def write_ensemble(repo: Path, name: str, inputs: list[str], outputs: list[str], steps: list[str]) -> Path:
    tensor = '{{ name: "{}" data_type: TYPE_INT32 dims: [ 16 ] }}'
    config = textwrap.dedent(
        f"""\
        name: "{name}"
        platform: "ensemble"
        max_batch_size: 8
        input [ {", ".join(tensor.format(n) for n in inputs)} ]
        output [ {", ".join(tensor.format(n) for n in outputs)} ]
        ensemble_scheduling {{ step [ {", ".join(steps)} ] }}
        """
    )
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    (repo / name / "config.pbtxt").write_text(config)
    return repo / name


# (SUM, DIFF) = simple(A, B); then (TWICE_A, TWICE_B) = simple(SUM, DIFF)
CHAIN = [
    step("simple", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"}),
    step("simple", {"INPUT0": "SUM", "INPUT1": "DIFF"}, {"OUTPUT0": "TWICE_A", "OUTPUT1": "TWICE_B"}),
]
# one input, two branches on two models, a join: OUT = (X + X) + (X - X) = 2X
DIAMOND = [
    step("left", {"INPUT0": "X", "INPUT1": "X"}, {"OUTPUT0": "L"}),
    step("right", {"INPUT0": "X", "INPUT1": "X"}, {"OUTPUT1": "R"}),
    step("simple", {"INPUT0": "L", "INPUT1": "R"}, {"OUTPUT0": "OUT"}),
]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    for name in ("simple", "left", "right"):
        make_simple_onnx(tmp_path, name=name, extra_config="dynamic_batching { }\n")
    write_ensemble(tmp_path, "chain", ["A", "B"], ["TWICE_A", "TWICE_B"], CHAIN)
    write_ensemble(tmp_path, "diamond", ["X"], ["OUT"], DIAMOND)
    return tmp_path


@pytest.fixture
async def server(repo: Path):
    server = InferenceServer(repo, gpu_count=0, settings=EngineSettings(open_repository_control=True))
    await server.start()
    yield server
    await server.stop()


def request(model: str, **inputs: np.ndarray) -> InferenceRequest:
    return InferenceRequest(model_name=model, inputs=inputs, batch_size=next(iter(inputs.values())).shape[0])


async def test_it_passes_tensors_from_step_to_step(server):
    response = await server.infer(request("chain", A=A, B=B))
    np.testing.assert_array_equal(response.outputs["TWICE_A"], 2 * A)
    np.testing.assert_array_equal(response.outputs["TWICE_B"], 2 * B)
    assert (response.model_name, response.model_version) == ("chain", 1)


async def test_it_runs_independent_branches_at_once(server):
    batch = np.arange(32, dtype=np.int32).reshape(2, 16)
    response = await server.infer(request("diamond", X=batch))
    np.testing.assert_array_equal(response.outputs["OUT"], 2 * batch)
    spans = {index: (began, ended) for index, began, ended in server.get_model("diamond").dispatcher.step_seconds}
    (left_began, left_ended), (right_began, right_ended) = spans[0], spans[1]
    assert left_began < right_ended and right_began < left_ended  # the two branches overlapped
    assert spans[2][0] >= max(left_ended, right_ended)  # the join waited for both


async def test_calls_from_many_ensemble_requests_batch_together_and_count_in_both_stats(server):
    before = server.statistics("simple")["model_stats"][0]["inference_count"]
    await asyncio.gather(*(server.infer(request("chain", A=A, B=B)) for _ in range(20)))
    ensemble = server.statistics("chain")["model_stats"][0]
    simple = server.statistics("simple")["model_stats"][0]
    assert ensemble["inference_stats"]["success"]["count"] == 20
    assert simple["inference_count"] - before == 40  # two steps per call
    assert simple["execution_count"] < 40 + before  # and the steps of concurrent calls shared batches


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([step("simple", {"INPUT0": "X", "INPUT1": "NOWHERE"}, {"OUTPUT0": "OUT"})], "reads 'NOWHERE'"),
        (
            [
                step("simple", {"INPUT0": "X", "INPUT1": "X"}, {"OUTPUT0": "OUT"}),
                step("left", {"INPUT0": "X", "INPUT1": "X"}, {"OUTPUT0": "OUT"}),
            ],
            "tensor 'OUT' is produced twice, by step 0 \\('simple'\\) and step 1 \\('left'\\)",
        ),
        (
            [
                step("simple", {"INPUT0": "X", "INPUT1": "P"}, {"OUTPUT0": "Q"}),
                step("left", {"INPUT0": "X", "INPUT1": "Q"}, {"OUTPUT0": "P"}),
                step("right", {"INPUT0": "X", "INPUT1": "X"}, {"OUTPUT0": "OUT"}),
            ],
            "the steps form a cycle",
        ),
        ([step("simple", {"INPUT0": "X", "INPUT1": "X"}, {"OUTPUT0": "OTHER"})], "'OUT' is produced by no step"),
        ([step("simple", {"INPUT0": "X", "WRONG": "X"}, {"OUTPUT0": "OUT"})], "has no input 'WRONG'"),
    ],
)
async def test_it_refuses_an_ensemble_it_cannot_run_and_names_the_step(server, repo, steps, message):
    write_ensemble(repo, "broken", ["X"], ["OUT"], steps)
    with pytest.raises(InferaError, match=message) as refused:
        await server.load_model("broken")
    status = server.status("broken")
    assert not server.model_ready("broken")
    assert refused.value.reason in (status.error, status.failure(1))


async def test_it_refuses_a_type_that_cannot_match(server, repo):
    write_ensemble(repo, "typed", ["X"], ["OUT"], [step("simple", {"INPUT0": "X", "INPUT1": "X"}, {"OUTPUT0": "OUT"})])
    text = (repo / "typed" / "config.pbtxt").read_text().replace("TYPE_INT32", "TYPE_FP32", 1)
    (repo / "typed" / "config.pbtxt").write_text(text)
    with pytest.raises(InferaError, match="tensor 'X' for input 'INPUT[01]' is TYPE_FP32, the input takes TYPE_INT32"):
        await server.load_model("typed")


async def test_it_waits_for_a_missing_model_and_serves_once_it_arrives(server, repo):
    write_ensemble(repo, "late", ["X"], ["OUT"], [step("later", {"INPUT0": "X", "INPUT1": "X"}, {"OUTPUT0": "OUT"})])
    with pytest.raises(InferaError, match="step 0 \\('later'\\) needs model 'later', which is not loaded"):
        await server.load_model("late")
    assert "not loaded" in server.status("late").versions[1].reason
    make_simple_onnx(repo, name="later")
    await server.load_model("later")
    assert server.model_ready("late")
    response = await server.infer(request("late", X=A))
    np.testing.assert_array_equal(response.outputs["OUT"], 2 * A)


async def test_it_loads_the_models_its_steps_need_from_the_repository(repo):
    server = InferenceServer(repo, gpu_count=0, settings=EngineSettings(open_repository_control=True))
    await server.start(load_models=False)
    try:
        await server.load_model("diamond")
        assert all(server.model_ready(name) for name in ("diamond", "left", "right", "simple"))
    finally:
        await server.stop()


async def test_unloading_a_model_makes_the_ensemble_unavailable_until_it_returns(server):
    await server.unload_model("left")
    status = server.status("diamond").versions[1]
    assert status.state is ModelState.UNAVAILABLE and "needs model 'left', which is not loaded" in status.reason
    with pytest.raises(Unavailable, match="not ready: .*'left'"):
        await server.infer(request("diamond", X=A))
    await server.load_model("left")
    assert server.model_ready("diamond")
    np.testing.assert_array_equal((await server.infer(request("diamond", X=A))).outputs["OUT"], 2 * A)


async def test_switching_a_steps_version_under_load_fails_no_request(server, repo):
    shutil.copytree(repo / "simple" / "1", repo / "simple" / "2")
    callers_done = asyncio.Event()
    answers: list = []

    async def caller() -> None:
        while not callers_done.is_set():
            answers.append(await server.infer(request("chain", A=A, B=B)))

    tasks = [asyncio.create_task(caller()) for _ in range(32)]
    while len(answers) < 64:
        await asyncio.sleep(0)
    await server.load_model("simple")  # version 2 replaces version 1 under the callers' feet
    seen = len(answers)
    while len(answers) < seen + 64:
        await asyncio.sleep(0)
    callers_done.set()
    await asyncio.gather(*tasks)  # any failed call would raise here
    assert all(np.array_equal(a.outputs["TWICE_A"], 2 * A) for a in answers)
    assert server.get_model("simple").version == 2
