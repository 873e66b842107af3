"""Python models in stub processes: a stub that dies or hangs fails its own request, and its instance comes back."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.engine.backends.python_client import A, B, int32_pair, scrape, tensor

pytestmark = pytest.mark.server


def crasher_pid(client: httpclient.InferenceServerClient, value: int = 1, **options) -> int:
    result = client.infer("crasher", [tensor("X", np.array([[value]], np.int32), "INT32")], **options)
    return int(result.as_numpy("PID")[0, 0])


def restarts(url: str) -> float:
    families = scrape(url)
    labels = {"model": "crasher", "version": "1", "instance": "crasher_0_0"}
    family = families["infera_instance_restarts"]
    return next(s.value for s in family.samples if s.labels == labels)


def assert_others_serve(client: httpclient.InferenceServerClient) -> None:
    np.testing.assert_array_equal(client.infer("simple", int32_pair()).as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(client.infer("add_sub", int32_pair()).as_numpy("OUTPUT1"), A - B)


def test_a_stub_that_exits_fails_its_request_and_comes_back(python_url):
    client = httpclient.InferenceServerClient(python_url)
    first = crasher_pid(client)
    with pytest.raises(InferenceServerException) as failure:
        crasher_pid(client, 13)
    assert failure.value.status() == "500"
    assert "stub process exited with code 1 while running this request" in failure.value.message()
    assert_others_serve(client)
    again = crasher_pid(client)
    assert again != first and client.is_model_ready("crasher")
    assert restarts(python_url) >= 1


def test_a_request_that_runs_past_its_timeout_is_answered_and_the_stub_replaced(python_url):
    client = httpclient.InferenceServerClient(python_url)
    first = crasher_pid(client)
    with pytest.raises(InferenceServerException, match="timed out while the model ran it"):
        crasher_pid(client, 7, timeout=200_000)  # the model sleeps for ten minutes on 7
    assert_others_serve(client)
    assert crasher_pid(client) != first


def test_the_model_runs_outside_the_server_process(python_url):
    client = httpclient.InferenceServerClient(python_url)
    import os

    assert crasher_pid(client) != os.getpid()
    assert crasher_pid(client) == crasher_pid(client)  # one stub per instance, kept between requests
