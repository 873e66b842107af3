"""A burst at a slow model whose queue is full: shed with 503 and Retry-After, probes and pages still answer, and
everything serves again once the model catches up, under uvicorn and daphne.

`slow` runs one batch at a time and queues two requests (Triton's `max_queue_size`); each batch waits at a gate the
test opens (tests/engine/gated_model.py), so the queue is full exactly when the test says it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from tritonclient.utils import InferenceServerException

from tests.conftest import ServerProcess, serve_process
from tests.console.live_http import Answer, ask, connect, grpc_infer, infer_gated, wait_for_pending
from tests.engine.gated_model import GatedModel
from tests.engine.model_factory import make_simple_onnx

pytestmark = pytest.mark.server

QUEUE = 2
BURST = 8
DEADLINE_S = 60  # a bound on waiting for each event, never a pause
SIMPLE_INPUT = {"shape": [1, 16], "datatype": "INT32", "data": list(range(16))}
SIMPLE_BODY = json.dumps({"inputs": [{"name": name, **SIMPLE_INPUT} for name in ("INPUT0", "INPUT1")]})
SLOW_CONFIG = f"dynamic_batching {{ default_queue_policy {{ max_queue_size: {QUEUE} }} }}\n"


@pytest.fixture(scope="module", params=["uvicorn", "daphne"])
def slow_server(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[tuple[ServerProcess, GatedModel]]:
    root = tmp_path_factory.mktemp(f"overload-{request.param}")
    gated = GatedModel(root / "pipes", name="slow")
    gated.write(root / "var" / "models", extra_config=SLOW_CONFIG)
    make_simple_onnx(root / "var" / "models", name="simple")
    env = {"INFERA_DISABLE_NVML": "1"}
    try:
        with serve_process(root / "var", "--no-seed", "--server", request.param, env=env) as server:
            for model in ("slow", "simple"):
                assert server.wait_for(f"/v2/models/{model}/ready", timeout=DEADLINE_S) == 200, server.log()[-3000:]
            yield server, gated
    finally:
        gated.close()


def fill_the_model(server: ServerProcess, gated: GatedModel, pool: ThreadPoolExecutor) -> list[Future[Answer]]:
    """One batch running in the model and QUEUE requests waiting: the next request finds the queue full."""
    gated.forget_started()  # an earlier test's batches: waiting on their lines would not wait for this one's
    taken = [pool.submit(infer_gated, server, "slow")]
    gated.wait_started(DEADLINE_S)
    taken += [pool.submit(infer_gated, server, "slow") for _ in range(QUEUE)]
    wait_for_pending(server, "slow", QUEUE)
    return taken


def test_it_sheds_a_burst_with_503_and_retry_after_and_recovers(slow_server):
    server, gated = slow_server
    with ThreadPoolExecutor(QUEUE + 1 + BURST) as pool:
        taken = fill_the_model(server, gated, pool)
        burst = [pool.submit(infer_gated, server, "slow") for _ in range(BURST)]
        for refused in (future.result(timeout=DEADLINE_S) for future in burst):
            assert refused.status == 503 and refused.headers["retry-after"] == "1"
            message = refused.json()["error"]
            assert message.startswith("Exceeds maximum queue size: model 'slow' already has 2 requests waiting")
        with pytest.raises(InferenceServerException) as over_grpc:
            grpc_infer(server, "slow")
        assert over_grpc.value.status() == "StatusCode.UNAVAILABLE"
        assert "Exceeds maximum queue size" in over_grpc.value.message()

        gated.release(1 + QUEUE)
        for answer in (future.result(timeout=DEADLINE_S) for future in taken):
            assert answer.status == 200 and answer.json()["outputs"][0]["data"] == [7.0]
    wait_for_pending(server, "slow", 0)
    gated.release(1)
    assert infer_gated(server, "slow").status == 200  # no intervention: the next request is served


def test_it_answers_probes_pages_and_other_models_while_the_queue_is_full(slow_server):
    server, gated = slow_server
    with ThreadPoolExecutor(QUEUE + 1) as pool:
        taken = fill_the_model(server, gated, pool)
        probe = connect(server)
        try:
            assert ask(probe, "GET", "/v2/health/live").status == 200
            assert ask(probe, "GET", "/v2/health/ready").status == 200
            assert ask(probe, "GET", "/v2/models/slow/ready").status == 200
        finally:
            probe.close()
        for page in ("/accounts/login/", "/metrics", "/static/console/console.css"):
            assert server.get(page)[0] == 200, page
        other = connect(server)
        try:
            assert ask(other, "POST", "/v2/models/simple/infer", SIMPLE_BODY).status == 200
        finally:
            other.close()
        gated.release(1 + QUEUE)
        answers = [future.result(timeout=DEADLINE_S) for future in taken]
        assert [a.status for a in answers] == [200] * len(taken), [a.body[:300] for a in answers]
