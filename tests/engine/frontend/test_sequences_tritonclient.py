"""Stateful models through a real server with tritonclient: control tensors, direct and oldest, implicit state."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from console.demo.sequences import SIMPLE_SEQUENCE_ONNX_CONFIG, accumulator_onnx_bytes, write_sequence_models
from tests.engine.frontend.server_process import free_port, running_server

pytestmark = pytest.mark.server

# the accumulator, oldest strategy, with a long queue delay and a preferred batch of 4, on one instance (two, the
# default on the CPU, would each batch their own sequences): four sequences that start at once make one batch,
# whatever the machine's speed
BATCHED_CONFIG = (
    SIMPLE_SEQUENCE_ONNX_CONFIG.replace('name: "simple_sequence_onnx"', 'name: "batched"').replace(
        "preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 1000",
        "preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 10000000",
    )
    + "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
)
SWITCHING_CONFIG = SIMPLE_SEQUENCE_ONNX_CONFIG.replace('name: "simple_sequence_onnx"', 'name: "switching"')


@dataclass
class Served:
    http_url: str
    grpc_url: str
    repo: Path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    repo = tmp_path_factory.mktemp("sequence-repository")
    write_sequence_models(repo)
    for name, config in (("batched", BATCHED_CONFIG), ("switching", SWITCHING_CONFIG)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.onnx").write_bytes(accumulator_onnx_bytes())
    grpc_port = free_port()
    log = tmp_path_factory.mktemp("sequence-logs") / "uvicorn.log"
    with running_server("uvicorn", repo, log, extra_env={"INFERA_GRPC_PORT": str(grpc_port)}) as url:
        yield Served(url, f"127.0.0.1:{grpc_port}", repo)


@pytest.fixture(scope="module")
def client(served: Served) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(served.http_url) as client:
        yield client


def value(number: int) -> list[httpclient.InferInput]:
    entry = httpclient.InferInput("INPUT", [1, 1], "INT32")
    entry.set_data_from_numpy(np.array([[number]], np.int32))
    return [entry]


def step(client, model: str, sid, number: int, start=False, end=False) -> int:
    result = client.infer(model, value(number), sequence_id=sid, sequence_start=start, sequence_end=end)
    return int(result.as_numpy("OUTPUT")[0, 0])


def run_interleaved(client, model: str, ids: list, steps: list[int]) -> dict:
    """Every sequence gets the same values, one step of each in turn; the answers of each sequence in order."""
    answers: dict = {sid: [] for sid in ids}
    for index, number in enumerate(steps):
        for offset, sid in enumerate(ids):
            first, last = index == 0, index == len(steps) - 1
            answers[sid].append(step(client, model, sid, number + offset, start=first, end=last))
    return answers


@pytest.mark.parametrize(
    ("model", "ids"),
    [
        ("simple_sequence", [101, 102, "user-a"]),
        ("simple_sequence_onnx", [201, "user-b", 202]),
    ],
)
def test_interleaved_sequences_each_get_their_own_running_sum(client, model, ids):
    answers = run_interleaved(client, model, ids, [1, 2, 3, 4])
    for offset, sid in enumerate(ids):
        inputs = [number + offset for number in (1, 2, 3, 4)]
        assert answers[sid] == list(np.cumsum(inputs)), sid


def test_the_corrid_control_carries_the_correlation_id(client):
    assert step(client, "simple_dyna_sequence", 900, 5, start=True) == 5
    assert step(client, "simple_dyna_sequence", 900, 6, end=True) == 11 + 900


def test_implicit_state_resets_at_start(client):
    assert step(client, "simple_sequence_onnx", 77, 10, start=True) == 10
    assert step(client, "simple_sequence_onnx", 77, 5) == 15
    assert step(client, "simple_sequence_onnx", 77, 1, start=True) == 1  # a START for a live id begins anew
    assert step(client, "simple_sequence_onnx", 77, 2, end=True) == 3


@pytest.mark.parametrize(
    ("model", "options", "message"),
    [
        ("simple_sequence", {}, "must specify a non-zero or non-empty correlation ID"),
        ("simple_sequence", {"sequence_id": 4242}, "must specify the START flag on the first request"),
        ("simple_sequence_onnx", {"sequence_id": "never-started"}, "must specify the START flag"),
        ("simple_dyna_sequence", {"sequence_id": "text", "sequence_start": True}, "CORRID control is UINT64"),
    ],
)
def test_it_refuses_requests_triton_refuses(client, model, options, message):
    with pytest.raises(InferenceServerException, match=message) as failure:
        client.infer(model, value(1), **options)
    assert failure.value.status() == "400"


def test_after_an_end_the_id_is_unknown_again(client):
    step(client, "simple_sequence", 31, 1, start=True, end=True)
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        step(client, "simple_sequence", 31, 1)


async def test_more_sequences_than_slots_wait_in_the_backlog_and_all_finish(served):
    # simple_sequence has one instance of 8 slots; 12 sequences of 3 steps each run at once
    async def sequence(client, sid: int) -> list[int]:
        answers = []
        for index, number in enumerate((sid, 1, 1)):
            result = await client.infer(
                "simple_sequence", value(number), sequence_id=sid, sequence_start=index == 0, sequence_end=index == 2
            )
            answers.append(int(result.as_numpy("OUTPUT")[0, 0]))
        return answers

    async with aioclient.InferenceServerClient(served.http_url, conn_limit=16) as client:
        results = await asyncio.gather(*(sequence(client, sid) for sid in range(1000, 1012)))
    assert results == [[sid, sid + 1, sid + 2] for sid in range(1000, 1012)]


async def test_oldest_batches_requests_of_different_sequences(served):
    async with aioclient.InferenceServerClient(served.http_url) as client:
        results = await asyncio.gather(
            *(
                client.infer("batched", value(sid), sequence_id=sid, sequence_start=True, sequence_end=True)
                for sid in (61, 62, 63, 64)
            )
        )
        stats = await client.get_inference_statistics("batched")
    assert sorted(int(r.as_numpy("OUTPUT")[0, 0]) for r in results) == [61, 62, 63, 64]
    sizes = {int(b["batch_size"]) for b in stats["model_stats"][0]["batch_stats"]}
    assert 4 in sizes


def test_a_version_switch_lets_live_sequences_finish_on_the_old_version(client, served):
    old = client.infer("switching", value(5), sequence_id=55, sequence_start=True)
    assert (old.get_response()["model_version"], int(old.as_numpy("OUTPUT")[0, 0])) == ("1", 5)
    shutil.copytree(served.repo / "switching" / "1", served.repo / "switching" / "2")
    client.load_model("switching")  # version 2 takes new sequences at once; this call does not wait for 55
    fresh = client.infer("switching", value(1), sequence_id=56, sequence_start=True, sequence_end=True)
    assert fresh.get_response()["model_version"] == "2"
    carried = client.infer("switching", value(3), sequence_id=55, sequence_end=True)
    assert (carried.get_response()["model_version"], int(carried.as_numpy("OUTPUT")[0, 0])) == ("1", 8)


def test_a_grpc_stream_carries_a_sequence(served):
    answers: list = []
    with grpcclient.InferenceServerClient(served.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.append(error or result))
        for index, number in enumerate((4, 5, 6)):
            entry = grpcclient.InferInput("INPUT", [1, 1], "INT32")
            entry.set_data_from_numpy(np.array([[number]], np.int32))
            client.async_stream_infer(
                "simple_sequence_onnx", [entry], sequence_id=3030, sequence_start=index == 0, sequence_end=index == 2
            )
        client.stop_stream()  # waits for the stream's answers
    assert [int(a.as_numpy("OUTPUT")[0, 0]) for a in answers] == [4, 9, 15]


def test_metrics_count_live_sequences_and_the_backlog(client, served):
    from tests.engine.backends.python_client import scrape

    step(client, "simple_sequence_onnx", 8080, 1, start=True)
    families = scrape(served.http_url)
    labels = {"model": "simple_sequence_onnx", "version": "1"}
    live = next(s.value for s in families["infera_sequences_live"].samples if s.labels == labels)
    backlog = next(s.value for s in families["infera_sequence_backlog"].samples if s.labels == labels)
    assert live >= 1 and backlog == 0
    step(client, "simple_sequence_onnx", 8080, 1, end=True)
