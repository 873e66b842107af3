"""BLS into a decoupled model: exec(decoupled=True) and async_exec(decoupled=True) iterate its responses as they come
(the last may carry the final flag alone), cancel() reaches the model, and exec() without decoupled is refused with
Triton's advice; from a stub process and in process."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.server

CALLERS = ["bls_decoupled", "bls_decoupled_in_process"]


def call(url: str, model: str, values: list[int], mode: str) -> httpclient.InferResult:
    client = httpclient.InferenceServerClient(url)
    tensor = httpclient.InferInput("IN", [len(values)], "INT32")
    tensor.set_data_from_numpy(np.array(values, dtype=np.int32))
    return client.infer(model, [tensor], parameters={"mode": mode})


@pytest.mark.parametrize("model", CALLERS)
@pytest.mark.parametrize("mode", ["collect", "async"])
@pytest.mark.parametrize("values", [[], [7], [3, 1, 4, 1, 5]])
def test_it_iterates_every_response_of_a_decoupled_model(python_url, model, mode, values):
    result = call(python_url, model, values, mode)
    assert result.as_numpy("OUT").tolist() == values
    # repeat sends its elements, then the final flag on its own: one more response, an empty one
    assert result.as_numpy("COUNT").tolist() == [len(values) + 1]
    assert result.as_numpy("EMPTY_LAST").tolist() == [1]


@pytest.mark.parametrize("model", CALLERS)
def test_cancelling_the_iterator_cancels_the_call(python_url, model):
    result = call(python_url, model, [9], "cancel")
    # the first response, then the one repeat sends only once request.is_cancelled() says the caller gave up
    assert result.as_numpy("OUT").tolist() == [9, -1]
    assert result.as_numpy("EMPTY_LAST").tolist() == [0]


@pytest.mark.parametrize("model", CALLERS)
def test_a_call_without_decoupled_is_refused_with_the_reason(python_url, model):
    with pytest.raises(InferenceServerException, match="Model repeat is using the decoupled transaction policy"):
        call(python_url, model, [1, 2], "plain")
