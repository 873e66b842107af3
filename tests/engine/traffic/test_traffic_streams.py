"""Traffic policies on a decoupled model's streams: a canary splits them (the guard counts streams that end in an
error and rolls back), a shadow is refused with the reason (no one answer to compare)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from engine.errors import InvalidArgument
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings
from engine.traffic.policies import TrafficPolicy
from engine.types import InferenceRequest
from tests.engine.decoupled_models import DECOUPLED, IN_PROCESS, REPEAT, repeat_config
from tests.engine.model_factory import make_python_model

ALL_VERSIONS = "version_policy { all { } }\n"


@pytest.fixture
async def server(tmp_path: Path):
    model = make_python_model(
        tmp_path, "repeat", REPEAT, repeat_config("repeat"), extra_config=DECOUPLED + IN_PROCESS + ALL_VERSIONS
    )
    shutil.copytree(model / "1", model / "2")
    server = InferenceServer(tmp_path, gpu_count=0, settings=EngineSettings())
    await server.start()
    server.set_active_version("repeat", 1)
    yield server
    await server.stop()


async def answered_by(server: InferenceServer, **parameters) -> tuple[int, list]:
    """(the version that answered, every response) of one stream of three elements."""
    request = InferenceRequest("repeat", {"IN": np.array([4, 5, 6], np.int32)}, parameters=parameters)
    opened = await server.infer_stream(request)
    return opened.model_version, [response async for response in opened]


async def test_a_canary_sends_streams_to_its_candidate(server):
    server.set_traffic_policy("repeat", TrafficPolicy(mode="canary", weights={1: 0, 2: 100}))
    for _ in range(5):
        version, responses = await answered_by(server)
        assert version == 2
        assert [int(r.outputs["OUT"][0]) for r in responses if r.outputs] == [4, 5, 6] and responses[-1].final
    stats = {entry["version"]: entry["stream_stats"] for entry in server.statistics("repeat")["model_stats"]}
    assert stats["2"]["finished"] == 5 and stats["1"]["finished"] == 0
    server.set_traffic_policy("repeat", TrafficPolicy(mode="canary", weights={1: 100, 2: 0}))
    assert (await answered_by(server))[0] == 1


async def test_the_guard_rolls_back_a_canary_whose_streams_fail(server):
    rolled = []
    server.on_traffic_rollback = lambda model, policy, reason: rolled.append((model, policy.mode, reason))
    policy = TrafficPolicy(mode="canary", weights={1: 0, 2: 100}, rollback_error_rate=0.5, rollback_min_requests=3)
    server.set_traffic_policy("repeat", policy)
    for _ in range(3):
        version, responses = await answered_by(server, fail_at=1)  # the stream's second response is an error
        assert version == 2 and responses[-1].error is not None and responses[-1].final
    assert rolled and rolled[0][:2] == ("repeat", "canary") and "failed 100% of 3 requests" in rolled[0][2]
    assert server.traffic_status("repeat")["policy"]["mode"] == "active"
    assert (await answered_by(server))[0] == 1


async def test_a_shadow_is_refused_for_a_decoupled_model(server):
    with pytest.raises(InvalidArgument, match="a shadow compares each request's one answer from two versions"):
        server.set_traffic_policy("repeat", TrafficPolicy(mode="shadow", candidate=2))
    assert server.traffic_status("repeat")["policy"]["mode"] == "active"
