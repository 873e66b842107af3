"""Ensembles as Triton runs them, through a real server with tritonclient (HTTP and gRPC): only the steps the
requested outputs need run, a step's model that leaves an output out gives the partial result, and a streamed
ensemble's responses carry the request's sequence parameters (issue 36, item 6)."""

from __future__ import annotations

import http.client
import json
import queue
import textwrap
from collections.abc import Iterator
from functools import partial

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.engine.decoupled_models import DECOUPLED, IN_PROCESS, REPEAT, make_decoupled_ensemble, repeat_config
from tests.engine.ensembles.test_ensembles import step, write_ensemble
from tests.engine.frontend.server_process import Served, running_with_grpc
from tests.engine.model_factory import make_python_model, make_simple_onnx, python_config

pytestmark = pytest.mark.server

A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)
# X = A + B; Y = X + B (needs X); Z = A - B: three runs of `simple`, Y needs two of them, Z one
THREE_STEPS = [
    step("simple", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "X"}),
    step("simple", {"INPUT0": "X", "INPUT1": "B"}, {"OUTPUT0": "Y"}),
    step("simple", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT1": "Z"}),
]
# answers KEPT and never LEFT_OUT, which its config declares too
HALF = textwrap.dedent(
    """
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            def kept(request):
                return pb_utils.Tensor("KEPT", pb_utils.get_input_tensor_by_name(request, "IN").as_numpy())

            return [pb_utils.InferenceResponse([kept(r)]) for r in requests]
    """
)
PARTIAL = """\
name: "partial"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "FIRST" data_type: TYPE_INT32 dims: [ 4 ] }, { name: "SECOND" data_type: TYPE_INT32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "half" model_version: -1 input_map { key: "IN" value: "IN" }
    output_map { key: "KEPT" value: "FIRST" } output_map { key: "LEFT_OUT" value: "SECOND" } }
] }
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    repo = tmp_path_factory.mktemp("ensemble-parity")
    make_simple_onnx(repo, name="simple")
    write_ensemble(repo, "three_steps", ["A", "B"], ["X", "Y", "Z"], THREE_STEPS)
    pair = [("KEPT", "TYPE_INT32", [4]), ("LEFT_OUT", "TYPE_INT32", [4])]
    make_python_model(
        repo, "half", HALF, python_config("half", [("IN", "TYPE_INT32", [4])], pair, 0), extra_config=IN_PROCESS
    )
    (repo / "partial" / "1").mkdir(parents=True)
    (repo / "partial" / "config.pbtxt").write_text(PARTIAL)
    make_python_model(repo, "repeat", REPEAT, repeat_config("repeat"), extra_config=DECOUPLED + IN_PROCESS)
    make_decoupled_ensemble(repo, IN_PROCESS)
    with running_with_grpc(repo, tmp_path_factory.mktemp("ensemble-parity-logs") / "uvicorn.log") as served:
        yield served


def inputs(module, **arrays: np.ndarray) -> list:
    made = []
    for name, array in arrays.items():
        entry = module.InferInput(name, list(array.shape), module.np_to_triton_dtype(array.dtype))
        entry.set_data_from_numpy(array)
        made.append(entry)
    return made


def simple_runs(client) -> int:
    """How many requests `simple` has answered, from its statistics."""
    if isinstance(client, grpcclient.InferenceServerClient):
        stats = client.get_inference_statistics("simple", as_json=True)
    else:
        stats = client.get_inference_statistics("simple")
    return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
@pytest.mark.parametrize(("wanted", "runs"), [(["Z"], 1), (["Y"], 2), (["X", "Z"], 2), ([], 3)])
def test_only_the_steps_the_requested_outputs_need_run(served, module, wanted, runs):
    client = served.client(module)
    before = simple_runs(client)
    outputs = [module.InferRequestedOutput(name) for name in wanted] or None
    result = client.infer("three_steps", inputs(module, A=A, B=B), outputs=outputs)
    assert simple_runs(client) - before == runs
    expected = {"X": A + B, "Y": A + B + B, "Z": A - B}
    for name in wanted or expected:
        np.testing.assert_array_equal(result.as_numpy(name), expected[name])
    for name in set(expected) - set(wanted or expected):
        assert result.as_numpy(name) is None


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_step_that_leaves_an_output_out_gives_the_partial_result(served, module):
    client = served.client(module)
    values = np.array([1, 2, 3, 4], dtype=np.int32)
    result = client.infer("partial", inputs(module, IN=values))
    np.testing.assert_array_equal(result.as_numpy("FIRST"), values)
    assert result.as_numpy("SECOND") is None


@pytest.mark.parametrize(
    ("sequence", "expected"),
    [
        ({"sequence_id": 7, "sequence_start": True, "sequence_end": True}, (7, True, True)),
        ({"sequence_id": 9, "sequence_start": True}, (9, True, False)),
        ({}, (0, False, False)),
    ],
)
def test_a_streamed_ensembles_responses_carry_the_sequence_parameters_over_grpc(served, sequence, expected):
    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(served.grpc_url)
    client.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), answers))
    try:
        client.async_stream_infer("each_plus_one", inputs(grpcclient, IN=np.array([10, 20], np.int32)), **sequence)
        seen = []
        for _ in range(2):
            result, error = answers.get(timeout=30)
            assert error is None, error
            parameters = result.get_response().parameters
            seen.append(
                (
                    int(result.as_numpy("RESULT")[0]),
                    parameters["sequence_id"].int64_param,
                    parameters["sequence_start"].bool_param,
                    parameters["sequence_end"].bool_param,
                )
            )
    finally:
        client.stop_stream()
    assert sorted(seen) == [(11, *expected), (21, *expected)]


def test_a_streamed_ensembles_responses_carry_the_sequence_parameters_over_http(served):
    host, port = served.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    body = {"IN": [10, 20], "parameters": {"sequence_id": 7, "sequence_start": True, "sequence_end": False}}
    connection.request("POST", "/v2/models/each_plus_one/generate_stream", json.dumps(body))
    answer = connection.getresponse()
    assert answer.status == 200
    events = [json.loads(line[len(b"data: ") :]) for line in answer.read().splitlines() if line.startswith(b"data: ")]
    connection.close()
    assert sorted(event["RESULT"] for event in events) == [11, 21]
    for event in events:
        assert (event["sequence_id"], event["sequence_start"], event["sequence_end"]) == (7, True, False)
