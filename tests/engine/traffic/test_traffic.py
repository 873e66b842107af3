"""Traffic policies in the engine: canary splits (sticky keys), shadow copies compared, automatic rollback."""

from __future__ import annotations

import asyncio
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine.errors import InvalidArgument, LoadError
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings
from engine.traffic.policies import RollbackGuard, TrafficPolicy, TrafficState, policy_from_dict
from engine.types import InferenceRequest
from tests.engine.model_factory import make_python_model, python_config

# version 1 doubles X, version 2 triples it; version 3 fails on negative inputs
SCALE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if self.version == 3 and (x < 0).any():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("no negatives")))
                continue
            factor = 2.0 if self.version == 1 else 3.0
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", (x * factor).astype(np.float32))]))
        return responses
"""
IN_PROCESS = 'parameters { key: "EXECUTION_MODE" value { string_value: "in_process" } }\n'
ALL_VERSIONS = "version_policy { all { } }\n"


@pytest.fixture
async def server(tmp_path: Path):
    config = python_config("scale", [("X", "TYPE_FP32", [2])], [("Y", "TYPE_FP32", [2])])
    model = make_python_model(tmp_path, "scale", SCALE, config, extra_config=IN_PROCESS + ALL_VERSIONS)
    for version in (2, 3):
        shutil.copytree(model / "1", model / str(version))
    server = InferenceServer(tmp_path, gpu_count=0, settings=EngineSettings())
    await server.start()
    server.set_active_version("scale", 1)
    yield server
    await server.stop()


def request(value: float = 1.0, **parameters) -> InferenceRequest:
    return InferenceRequest("scale", {"X": np.full((1, 2), value, np.float32)}, parameters=parameters)


async def factor_of(server, **parameters) -> float:
    response = await server.infer(request(**parameters))
    return float(response.outputs["Y"][0, 0])


async def test_a_canary_sends_its_share_within_a_binomial_tolerance(server):
    server.set_traffic_policy("scale", TrafficPolicy(mode="canary", weights={1: 90, 2: 10}))
    server.traffic["scale"].router.rng = random.Random(7)
    answers = [await factor_of(server) for _ in range(2000)]
    share = answers.count(3.0) / len(answers)
    assert abs(share - 0.10) < 4 * (0.1 * 0.9 / 2000) ** 0.5  # four standard deviations
    assert (await server.infer(InferenceRequest("scale", {"X": np.ones((1, 2), np.float32)}, model_version=2))).outputs[
        "Y"
    ][0, 0] == 3.0  # a request that names a version gets it


async def test_a_sticky_key_keeps_a_client_on_one_version(server):
    server.set_traffic_policy("scale", TrafficPolicy(mode="canary", weights={1: 50, 2: 50}))
    for key in ("alice", "bob", "carol", "dave"):
        seen = {await factor_of(server, sticky_key=key) for _ in range(20)}
        assert len(seen) == 1


async def test_a_shadow_answers_from_the_active_version_and_compares_the_candidate(server):
    server.set_traffic_policy("scale", TrafficPolicy(mode="shadow", candidate=2))
    answers = [await factor_of(server) for _ in range(10)]
    await asyncio.gather(*server._shadow_tasks)
    assert answers == [2.0] * 10  # never the candidate's answer
    comparison = server.traffic_status("scale")["shadow"]
    assert comparison["outputs"]["Y"]["disagree"] == 10 and comparison["outputs"]["Y"]["agree"] == 0
    assert comparison["outputs"]["Y"]["max_abs_diff"] == pytest.approx(1.0)
    assert len(comparison["disagreements"]) == 10 and comparison["disagreements"][0]["candidate"]["Y"]["values"][0] == 3


async def test_the_guard_rolls_back_a_failing_candidate(server):
    rolled = []
    server.on_traffic_rollback = lambda model, policy, reason: rolled.append((model, policy.mode, reason))
    policy = TrafficPolicy(mode="canary", weights={1: 0, 3: 100}, rollback_error_rate=0.2, rollback_min_requests=5)
    server.set_traffic_policy("scale", policy)
    for _ in range(5):
        with pytest.raises(Exception, match="no negatives"):
            await server.infer(request(-1.0))
    assert rolled and rolled[0][:2] == ("scale", "canary") and "failed 100% of 5 requests" in rolled[0][2]
    assert server.traffic_status("scale")["policy"]["mode"] == "active"
    assert await factor_of(server) == 2.0


async def test_a_policy_needs_ready_versions_and_keeps_them_loaded(server, tmp_path):
    with pytest.raises(InvalidArgument, match="version 9 is not READY"):
        server.set_traffic_policy("scale", TrafficPolicy(mode="canary", weights={1: 1, 9: 1}))
    with pytest.raises(InvalidArgument, match="is the active version"):
        server.set_traffic_policy("scale", TrafficPolicy(mode="shadow", candidate=1))
    server.set_traffic_policy("scale", TrafficPolicy(mode="shadow", candidate=2))
    shutil.rmtree(tmp_path / "scale" / "2")
    with pytest.raises(LoadError, match="version 2 of model 'scale' is in its shadow traffic policy"):
        await server.load_model("scale")
    assert server.model_ready("scale", 2)


def test_a_policy_reads_from_its_json_form_and_refuses_unknown_fields():
    policy = policy_from_dict({"mode": "canary", "weights": {"1": 90, "2": 10}})
    assert policy.weights == {1: 90.0, 2: 10.0} and policy_from_dict(policy.to_dict()) == policy
    with pytest.raises(InvalidArgument, match="unknown traffic policy field"):
        policy_from_dict({"mode": "canary", "wieghts": {}})


def test_the_guard_watches_p99_over_its_window():
    now = [0.0]
    guard = RollbackGuard(TrafficPolicy(rollback_p99_ms=50, rollback_min_requests=3), clock=lambda: now[0])
    assert guard.record(False, 0.010) is None and guard.record(False, 0.010) is None
    assert "p99 was 90.0 ms" in guard.record(False, 0.090)
    now[0] = 120.0  # the window moved on: old outcomes no longer count
    assert guard.record(False, 0.010) is None
    assert TrafficState.of(TrafficPolicy()).to_dict()["policy"]["mode"] == "active"
