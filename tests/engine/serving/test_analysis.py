"""Model analysis in the engine: candidate configs on temporary versions no request reaches, under in-process load."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from engine.config.model_config import SequenceBatching
from engine.errors import CodeRefused, InvalidArgument, ModelNotFound
from engine.serving.admission import SYSTEM, Principal
from engine.serving.analysis import (
    TEMPORARY_VERSION,
    Candidate,
    analysis_inputs,
    candidate_config,
    concurrency_levels,
    grid_candidates,
    sweep,
)
from engine.serving.server import InferenceServer
from engine.settings import ConfigLimits
from engine.types import InferenceRequest
from tests.engine.model_factory import make_simple_onnx, make_simple_string, simple_config


def temporary_threads() -> list[str]:
    prefix = f"infera-simple-{TEMPORARY_VERSION}-"
    return [thread.name for thread in threading.enumerate() if thread.name.startswith(prefix)]


def simple_request(version: int | None = None) -> InferenceRequest:
    x = np.arange(16, dtype=np.int32).reshape(1, 16)
    return InferenceRequest("simple", {"INPUT0": x, "INPUT1": x}, version, batch_size=1)


@pytest.fixture
async def server(tmp_path):
    make_simple_onnx(tmp_path, name="simple")
    engine = InferenceServer(tmp_path, gpu_count=0)
    await engine.start()
    yield engine
    await engine.stop()


def test_it_sweeps_concurrency_in_doublings_up_to_the_maximum():
    assert concurrency_levels(1) == [1]
    assert concurrency_levels(4) == [1, 2, 4]
    assert concurrency_levels(6) == [1, 2, 4, 6]
    with pytest.raises(InvalidArgument, match="maximum concurrency must be 1 or more"):
        concurrency_levels(0)


def test_it_builds_every_combination_of_the_knobs_as_partial_configs():
    base = simple_config("simple", max_batch_size=8)
    candidates = grid_candidates(base, [4, 8], [0, 500], [1])
    assert [c.label for c in candidates] == [
        "batch 4 · delay 0 µs · 1 instance",
        "batch 4 · delay 500 µs · 1 instance",
        "batch 8 · delay 0 µs · 1 instance",
        "batch 8 · delay 500 µs · 1 instance",
    ]
    second = candidates[1].override
    assert second["max_batch_size"] == 4
    assert second["dynamic_batching"]["max_queue_delay_microseconds"] == 500
    assert second["instance_group"][0]["count"] == 1
    config = candidate_config(base, candidates[1], ConfigLimits())
    assert config.max_batch_size == 4 and config.dynamic_batching.max_queue_delay_microseconds == 500


def test_it_keeps_the_bases_value_for_a_knob_left_empty():
    base = simple_config("simple", max_batch_size=8)
    (only,) = grid_candidates(base, [], [], [2])
    assert only.override["max_batch_size"] == 8 and only.override["instance_group"][0]["count"] == 2


def test_it_refuses_a_grid_that_changes_whether_the_model_batches():
    with pytest.raises(InvalidArgument, match="max_batch_size 0 in the grid: a model that batches needs 1 or more"):
        grid_candidates(simple_config("simple", max_batch_size=8), [0], [], [])


def test_it_refuses_sequence_models():
    base = simple_config("simple")
    base.sequence_batching = SequenceBatching()
    with pytest.raises(InvalidArgument, match="sequence models and ensembles cannot"):
        grid_candidates(base, [8], [0], [1])


def test_it_refuses_a_candidate_over_the_servers_limits_naming_the_field():
    base = simple_config("simple")
    (candidate,) = grid_candidates(base, [8], [0], [9])
    with pytest.raises(InvalidArgument, match="instance_group asks for 9 instances, over the limit of 4"):
        candidate_config(base, candidate, ConfigLimits(max_instances=4))


def test_it_makes_random_inputs_of_each_dtype_and_shape():
    config = simple_config("simple", max_batch_size=8, data_type="TYPE_INT8")
    inputs, batch = analysis_inputs(config)
    assert batch == 1
    assert inputs["INPUT0"].shape == (1, 16) and inputs["INPUT0"].dtype == np.int8
    strings, _ = analysis_inputs(simple_config("simple", data_type="TYPE_STRING"))
    assert all(isinstance(value, bytes) for value in strings["INPUT1"].ravel())


def test_it_checks_sample_inputs_against_the_config():
    config = simple_config("simple", max_batch_size=8)
    rows = [list(range(16))] * 2
    inputs, batch = analysis_inputs(config, {"INPUT0": rows, "INPUT1": rows})
    assert batch == 2 and inputs["INPUT0"].dtype == np.int32
    with pytest.raises(InvalidArgument, match=r"input 'INPUT0' expects shape \[-1, 16\], got \[2, 15\]"):
        analysis_inputs(config, {"INPUT0": [list(range(15))] * 2, "INPUT1": rows})
    with pytest.raises(InvalidArgument, match="missing required input"):
        analysis_inputs(config, {"INPUT0": rows})


async def test_it_measures_each_candidate_on_a_version_no_request_reaches(server):
    base = server.model_config("simple")
    candidates = grid_candidates(base, [8], [0, 200], [1])
    seen: list[str] = []
    answers: list[tuple[int, list]] = []
    done = asyncio.Event()

    async def client() -> None:
        # clients keep sending while the analysis runs: the served version answers them, as before
        while not done.is_set():
            answer = await server.infer(simple_request())
            answers.append((answer.model_version, answer.outputs["OUTPUT0"].tolist()))

    async def during(point):
        # the temporary version is loaded now: a request naming it is refused
        assert temporary_threads()
        with pytest.raises(ModelNotFound):
            await server.infer(simple_request(TEMPORARY_VERSION))
        seen.append(f"{point.candidate}@{point.concurrency}")

    clients = asyncio.ensure_future(client())
    try:
        points = await sweep(server, "simple", 1, candidates, [1, 2], 0.05, caller=SYSTEM, on_point=during)
    finally:
        done.set()
        await clients
    assert seen == ["0@1", "0@2", "1@1", "1@2"]
    assert [(p.candidate, p.concurrency) for p in points] == [(0, 1), (0, 2), (1, 1), (1, 2)]
    for point in points:
        assert point.requests > 0 and point.failures == 0 and point.throughput > 0
        assert point.p50_ms <= point.p99_ms and point.mean_batch >= 1
    assert answers and all(answer == (1, [list(range(0, 32, 2))]) for answer in answers)
    assert 0 < sum(p.client_requests for p in points) <= len(answers)  # the clients' requests, counted apart
    assert not temporary_threads()
    assert list(server.status("simple").versions) == [1]
    assert [s["version"] for s in server.statistics("simple")["model_stats"]] == ["1"]
    assert server.statistics("simple")["model_stats"][0]["inference_count"] == len(answers)


async def test_it_stops_at_the_next_point_once_cancelled_and_unloads(server):
    cancelled = asyncio.Event()

    async def cancel(point):
        cancelled.set()

    candidates = grid_candidates(server.model_config("simple"), [8], [0, 100], [1])
    points = await sweep(
        server, "simple", 1, candidates, [1, 2, 4], 0.05, caller=SYSTEM, on_point=cancel, cancelled=cancelled
    )
    assert len(points) == 1
    assert not temporary_threads()


async def test_it_unloads_the_temporary_version_when_the_sweep_is_cancelled(server):
    reached = asyncio.Event()

    async def wait_here(point):
        reached.set()
        await asyncio.Event().wait()  # held until cancelled

    candidates = [Candidate("as is", {"max_batch_size": 8})]
    task = asyncio.ensure_future(sweep(server, "simple", 1, candidates, [1], 0.01, caller=SYSTEM, on_point=wait_here))
    await reached.wait()
    assert temporary_threads()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not temporary_threads()
    assert (await server.infer(simple_request())).model_version == 1


async def test_it_refuses_a_python_model_to_a_caller_who_may_not_load_code(tmp_path):
    make_simple_string(tmp_path)
    server = InferenceServer(tmp_path, gpu_count=0)
    await server.start()
    try:
        operator = Principal("otto", may_change_models=True)
        candidates = grid_candidates(server.model_config("simple_string"), [], [], [1])
        with pytest.raises(CodeRefused):
            await sweep(server, "simple_string", 1, candidates, [1], 0.01, caller=operator)
    finally:
        await server.stop()
