"""The traffic router: a request's version chosen once, decoded against that version's config and run there; a
policy whose versions take other inputs or give other outputs than the active one refused with the tensor named."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import orjson
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient

from engine.config.text_format import parse_config_pbtxt
from engine.errors import IncompatibleVersion
from engine.frontend import V2App, handlers
from engine.frontend.grpc_server import GrpcFrontEnd
from engine.serving.server import InferenceServer, RequestKey
from engine.settings import EngineSettings, GrpcSettings
from engine.traffic.policies import TrafficPolicy, check_policy
from engine.types import InferenceRequest
from tests.engine.frontend.asgi_client import call
from tests.engine.model_factory import make_python_model, python_config
from tests.engine.traffic.test_traffic import ALL_VERSIONS, IN_PROCESS, SCALE


@pytest.fixture
async def server(tmp_path: Path):
    """`scale` (Y = X times its factor): version 1 takes X of [2], version 2 of any length ([-1]), version 3 X of
    FP64; version 1 active."""
    config = python_config("scale", [("X", "TYPE_FP32", [2])], [("Y", "TYPE_FP32", [2])])
    model = make_python_model(tmp_path, "scale", SCALE, config, extra_config=IN_PROCESS + ALL_VERSIONS)
    for version in (2, 3):
        shutil.copytree(model / "1", model / str(version))
    text = (model / "config.pbtxt").read_text()
    any_length = parse_config_pbtxt(text.replace("dims: [2]", "dims: [-1]"))
    doubles = parse_config_pbtxt(text.replace("TYPE_FP32", "TYPE_FP64", 1))
    server = InferenceServer(tmp_path, gpu_count=0, settings=EngineSettings())
    await server.start(load_models=False)
    await server.load_model("scale", version_configs={2: any_length, 3: doubles})
    server.set_active_version("scale", 1)
    yield server
    await server.stop()


def counted_routes(server: InferenceServer, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The versions the server's router chose, one entry per time it was asked."""
    chosen: list[int] = []
    route = server.router.route

    def counting(request):
        answer = route(request)
        chosen.append(answer.served.version)
        return answer

    monkeypatch.setattr(server.router, "route", counting)
    return chosen


def infer_body(values: list[float], **parameters) -> bytes:
    entry = {"name": "X", "datatype": "FP32", "shape": [1, len(values)], "data": values}
    return orjson.dumps({"inputs": [entry], **({"parameters": parameters} if parameters else {})})


def test_it_reads_a_requests_routing_fields_from_its_unchecked_parameters():
    key = RequestKey.of("scale", None, {"sticky_key": "alice", "sequence_id": 7, "sequence_start": True})
    assert (key.sequence_id, key.sequence_start, key.parameters["sticky_key"]) == (7, True, "alice")
    assert RequestKey.of("scale", 2, None) == RequestKey("scale", 2)
    assert RequestKey.of("scale", None, {"sequence_id": [1], "sequence_start": "yes"}).sequence_id == 0
    assert RequestKey.of("scale", None, "not an object") == RequestKey("scale")


async def test_it_decodes_a_request_against_the_canarys_config_when_it_runs_on_the_canary(server):
    app = V2App(server)
    three = infer_body([1.0, 1.0, 1.0])  # three elements: only version 2's config ([-1]) takes them
    refused = await call(app, "POST", "/v2/models/scale/infer", three)
    assert refused.status == 400 and "X" in refused.json()["error"]
    server.set_traffic_policy("scale", TrafficPolicy(mode="canary", weights={1: 0, 2: 100}))
    answer = await call(app, "POST", "/v2/models/scale/infer", three)
    assert answer.status == 200, answer.body
    assert answer.json()["model_version"] == "2" and answer.json()["outputs"][0]["data"] == [3.0, 3.0, 3.0]


async def test_it_consults_the_router_once_per_request(server, monkeypatch):
    app = V2App(server)
    chosen = counted_routes(server, monkeypatch)
    assert (await call(app, "POST", "/v2/models/scale/infer", infer_body([1.0, 2.0]))).status == 200
    assert chosen == [1]
    server.set_traffic_policy("scale", TrafficPolicy(mode="canary", weights={1: 0, 2: 100}))
    assert (await call(app, "POST", "/v2/models/scale/infer", infer_body([1.0, 2.0], sticky_key="a"))).status == 200
    generated = await call(app, "POST", "/v2/models/scale/generate", orjson.dumps({"X": [1.0, 2.0]}))
    assert generated.status == 200 and generated.json()["model_version"] == "2"
    assert chosen == [1, 2, 2]
    bad = await call(app, "POST", "/v2/models/scale/infer", b"{not json")
    assert bad.status == 400 and chosen == [1, 2, 2, 2]  # a malformed body counts as a failure of the routed one
    assert server.statistics("scale", 2)["model_stats"][0]["inference_stats"]["fail"]["count"] == 1


async def test_it_routes_a_request_that_names_no_version_when_the_caller_has_not(server):
    server.set_traffic_policy("scale", TrafficPolicy(mode="canary", weights={1: 0, 2: 100}))
    response = await server.infer(InferenceRequest("scale", {"X": np.ones((1, 2), np.float32)}))
    assert response.model_version == 2  # model code and ensembles call the server with requests of their own


@pytest.mark.parametrize(
    "policy", [TrafficPolicy(mode="canary", weights={1: 50, 3: 50}), TrafficPolicy(mode="shadow", candidate=3)]
)
async def test_it_refuses_a_policy_whose_candidate_takes_other_inputs(server, policy):
    with pytest.raises(IncompatibleVersion) as refused:
        server.set_traffic_policy("scale", policy)
    error = refused.value
    assert (error.status, error.model, error.version, error.active) == (400, "scale", 3, 1)
    assert (error.kind, error.tensor) == ("input", "X") and "input 'X' has datatype FP64" in error.message
    assert server.traffic_status("scale")["policy"]["mode"] == "active"


def test_it_names_the_output_that_differs_and_lets_minus_one_match_any_size():
    active = python_config("m", [("X", "TYPE_FP32", [2])], [("Y", "TYPE_FP32", [2])])
    wider = python_config("m", [("X", "TYPE_FP32", [-1])], [("Y", "TYPE_FP32", [-1])])
    other = python_config("m", [("X", "TYPE_FP32", [2])], [("Y", "TYPE_FP32", [3])])
    extra = python_config("m", [("X", "TYPE_FP32", [2])], [("Y", "TYPE_FP32", [2]), ("Z", "TYPE_FP32", [1])])
    unbatched = python_config("m", [("X", "TYPE_FP32", [2])], [("Y", "TYPE_FP32", [2])], max_batch_size=0)
    canary = TrafficPolicy(mode="canary", weights={1: 1, 2: 1})
    check_policy("m", canary, {1, 2}, 1, configs={1: active, 2: wider})
    for candidate, tensor, why in [
        (other, "Y", "has shape [-1, 3], version 1's [-1, 2]"),
        (extra, "Z", "is not one of version 1's"),
        (unbatched, "X", "has shape [2], version 1's [-1, 2]"),
    ]:
        with pytest.raises(IncompatibleVersion, match=tensor) as refused:
            check_policy("m", canary, {1, 2}, 1, configs={1: active, 2: candidate})
        assert refused.value.tensor == tensor and why in refused.value.message


async def test_it_routes_a_grpc_request_once_and_decodes_it_against_the_canarys_config(server, monkeypatch):
    front_end = GrpcFrontEnd(server, GrpcSettings(port=0, shutdown_grace_seconds=1))
    await front_end.start()
    client = aioclient.InferenceServerClient(f"127.0.0.1:{front_end.port}")
    try:
        server.set_traffic_policy("scale", TrafficPolicy(mode="canary", weights={1: 0, 2: 100}))
        chosen = counted_routes(server, monkeypatch)
        three = grpcclient.InferInput("X", [1, 3], "FP32")
        three.set_data_from_numpy(np.ones((1, 3), np.float32))
        result = await client.infer("scale", [three])
        assert result.get_response().model_version == "2" and result.as_numpy("Y").tolist() == [[3.0, 3.0, 3.0]]
        assert chosen == [2]
    finally:
        await client.close()
        await front_end.stop()


async def test_it_routes_a_large_body_on_the_event_loop_while_a_thread_decodes_it(server, monkeypatch):
    app = V2App(server, max_body_bytes=4 * 1024 * 1024)
    server.set_traffic_policy("scale", TrafficPolicy(mode="canary", weights={1: 0, 2: 100}))
    threads: list[str] = []
    route = server.router.route

    def recording(request):
        threads.append(threading.current_thread().name)
        return route(request)

    monkeypatch.setattr(server.router, "route", recording)
    document = orjson.loads(infer_body([1.0, 1.0, 1.0]))
    large = orjson.dumps({**document, "id": "x" * (handlers.DECODE_ON_LOOP_BYTES + 1)})
    answer = await call(app, "POST", "/v2/models/scale/infer", large)
    assert answer.status == 200 and answer.json()["model_version"] == "2"
    assert threads == [threading.main_thread().name]  # the model manager is read on the loop alone
