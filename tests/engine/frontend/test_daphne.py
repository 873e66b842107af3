"""The same standalone app under daphne (no lifespan: the engine starts on the first request)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.engine.frontend.server_process import running_server
from tests.engine.frontend.v2_checks import assert_guard_answers, infer_json, raw_request, simple_inputs

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def daphne_server_url(server_repository, tmp_path_factory):
    with running_server("daphne", server_repository, tmp_path_factory.mktemp("logs") / "daphne.log") as url:
        yield url


def test_it_serves_the_v2_protocol_under_daphne(daphne_server_url):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    with httpclient.InferenceServerClient(daphne_server_url) as client:
        assert client.is_server_ready() and client.get_server_metadata()["name"] == "infera"
        assert client.get_model_config("simple")["max_batch_size"] == 8
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", True), httpclient.InferRequestedOutput("OUTPUT1")]
        result = client.infer("simple", simple_inputs(a, a, (True, False)), outputs=outputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
        result = client.infer(
            "simple", simple_inputs(a, a), request_compression_algorithm="gzip", response_compression_algorithm="gzip"
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a * 0)
        with pytest.raises(InferenceServerException) as caught:
            client.infer("nope", simple_inputs(a, a))
        assert caught.value.status() == "400"
        assert client.get_inference_statistics("simple")["model_stats"][0]["inference_count"] >= 4


def test_it_answers_bad_requests_under_daphne(daphne_server_url):
    answer = raw_request(daphne_server_url, "POST", "/v2/models/simple/infer", b"{not json")
    assert answer.status == 400 and "malformed JSON" in json.loads(answer.body)["error"]
    wrong = raw_request(daphne_server_url, "POST", "/v2/models/simple/infer", infer_json([]))
    assert wrong.status == 400 and "missing required input(s)" in wrong.error()
    assert raw_request(daphne_server_url, "GET", "/v2/nowhere").status == 404
    assert_guard_answers(daphne_server_url)
