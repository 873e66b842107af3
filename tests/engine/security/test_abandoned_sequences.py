"""Issue 32, finding 10: sequence STARTs whose clients went away leave the backlog; the backlog and each caller's
open sequences are bounded.

The attack: 40 clients send a sequence START to a model whose slots are taken and disconnect; each START used to
wait in an unbounded backlog, take a slot in turn and hold it until it idled out, so a legitimate START waited
behind all of them. In the engine (a cancelled caller) and through a real server (uvicorn, tritonclient, raw
sockets that send and close, a cancelled gRPC call).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from console.demo.sequences import SIMPLE_SEQUENCE_ONNX_CONFIG, accumulator_onnx_bytes
from engine.config.model_config import InstanceGroup, SequenceBatching
from engine.errors import InvalidArgument
from engine.schedulers.sequence import SequenceBacklogFull, TooManySequences
from engine.serving.lifecycle import ModelManager
from engine.settings import SequenceLimits
from engine.types import current_caller
from tests.engine.frontend.server_process import Served, running_with_grpc
from tests.engine.schedulers.test_sequences_and_ordering import sequence_request
from tests.engine.serving.test_lifecycle import (  # noqa: F401 - the autouse fixture resets the registered backend
    make_config,
    reset_backend,
    version_dir,
)

HOUR_US = 3600 * 10**6
BACKLOG = 40


async def one_slot_model(tmp_path: Path, max_backlog: int = 256, max_per_caller: int = 128):
    """A sequence model with one slot (one instance, max_batch_size 1) whose sequences never idle out."""
    config = make_config(
        dynamic_batching=None,
        max_batch_size=1,
        sequence_batching=SequenceBatching(max_sequence_idle_microseconds=HOUR_US),
        instance_group=[InstanceGroup(kind="KIND_CPU", count=1)],
    )
    manager = ModelManager(sequence_limits=SequenceLimits(max_backlog, max_per_caller))
    await manager.load(config, {1: version_dir(tmp_path, 1, "2")})
    return manager, manager.get("scale")


async def until(condition, turns: int = 1000) -> None:
    """Let the loop run until `condition()` holds (the tasks reach their queue); fails after `turns` turns."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


async def test_it_takes_cancelled_starts_out_of_the_backlog_so_the_next_start_is_served(tmp_path):
    manager, served = await one_slot_model(tmp_path)
    batcher = served.dispatcher.batcher
    await served.infer(sequence_request(1, 1, start=True))  # holds the only slot
    gone = [asyncio.ensure_future(served.infer(sequence_request(sid, 1, start=True))) for sid in range(100, 140)]
    await until(lambda: len(batcher.backlog) == BACKLOG)
    for task in gone:
        task.cancel()
    results = await asyncio.gather(*gone, return_exceptions=True)
    assert all(isinstance(result, asyncio.CancelledError) for result in results)
    assert not batcher.backlog and batcher.abandoned == BACKLOG and batcher.live == 1
    assert served.stats.sequences["backlog"] == 0
    await served.infer(sequence_request(1, 1, end=True))
    response = await served.infer(sequence_request(2, 3, start=True))  # first in line: it takes the slot
    assert response.outputs["Y"].tolist() == [[6, 6]] and batcher.sequences[2].slot == 0
    await manager.stop()


async def test_the_queued_rest_of_a_sequence_whose_start_was_cancelled_fails_naming_why(tmp_path):
    manager, served = await one_slot_model(tmp_path)
    await served.infer(sequence_request(1, 1, start=True))
    start = asyncio.ensure_future(served.infer(sequence_request(5, 1, start=True)))
    later = asyncio.ensure_future(served.infer(sequence_request(5, 1, end=True)))
    await until(lambda: served.dispatcher.batcher.queued == 2)
    start.cancel()
    with pytest.raises(InvalidArgument, match="START request was cancelled before it ran"):
        await later
    assert not served.dispatcher.batcher.knows(5)
    await manager.stop()


async def test_it_refuses_a_start_past_the_backlog_limit(tmp_path):
    manager, served = await one_slot_model(tmp_path, max_backlog=2)
    await served.infer(sequence_request(1, 1, start=True))
    waiting = [asyncio.ensure_future(served.infer(sequence_request(sid, 1, start=True))) for sid in (2, 3)]
    await until(lambda: len(served.dispatcher.batcher.backlog) == 2)
    with pytest.raises(SequenceBacklogFull, match="INFERA_SEQUENCE_MAX_BACKLOG"):
        await served.infer(sequence_request(4, 1, start=True))
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    await manager.stop()


async def test_one_caller_may_not_hold_more_than_its_share_of_sequences(tmp_path):
    manager, served = await one_slot_model(tmp_path, max_per_caller=2)

    async def as_caller(caller, request):
        current_caller.set(caller)  # what the front end sets when it counts the request in
        return await served.infer(request)

    await as_caller("mallory", sequence_request(1, 1, start=True))
    waiting = asyncio.ensure_future(as_caller("mallory", sequence_request(2, 1, start=True)))
    await until(lambda: len(served.dispatcher.batcher.backlog) == 1)
    with pytest.raises(TooManySequences, match="INFERA_SEQUENCE_MAX_PER_CALLER") as refused:
        await as_caller("mallory", sequence_request(3, 1, start=True))
    assert refused.value.status == 429
    other = asyncio.ensure_future(as_caller("alice", sequence_request(4, 1, start=True)))  # others still start
    await until(lambda: len(served.dispatcher.batcher.backlog) == 2)
    await as_caller("mallory", sequence_request(1, 1, end=True))
    await waiting
    await as_caller("mallory", sequence_request(2, 1, end=True))
    await other
    assert served.dispatcher.batcher.open_by_caller == {"alice": 1}
    await manager.stop()


# ---- through a real server


# the accumulator with one slot whose sequences never idle out: a START that got the slot would hold it for good
ONE_SLOT_CONFIG = (
    SIMPLE_SEQUENCE_ONNX_CONFIG.replace('name: "simple_sequence_onnx"', 'name: "one_slot"')
    .replace("max_batch_size: 8", "max_batch_size: 1")
    .replace("max_sequence_idle_microseconds: 5000000", f"max_sequence_idle_microseconds: {HOUR_US}")
    .replace(
        "oldest { max_candidate_sequences: 64 preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 1000 }",
        "direct { }",
    )
    + "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    repo = tmp_path_factory.mktemp("abandoned-repository")
    (repo / "one_slot" / "1").mkdir(parents=True)
    (repo / "one_slot" / "config.pbtxt").write_text(ONE_SLOT_CONFIG)
    (repo / "one_slot" / "1" / "model.onnx").write_bytes(accumulator_onnx_bytes())
    log = tmp_path_factory.mktemp("abandoned-logs") / "uvicorn.log"
    with running_with_grpc(repo, log, {"INFERA_SEQUENCE_MAX_BACKLOG": str(BACKLOG)}) as served:
        yield served


def value(number: int, module=httpclient) -> list:
    entry = module.InferInput("INPUT", [1, 1], "INT32")
    entry.set_data_from_numpy(np.array([[number]], np.int32))
    return [entry]


def sequence_gauge(url: str, name: str) -> float:
    with urllib.request.urlopen(f"http://{url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == {"model": "one_slot", "version": "1"}:
                return sample.value
    raise AssertionError(f"no {name} for one_slot on /metrics")


def wait_for_backlog(url: str, count: int) -> None:
    """Until the model's backlog holds `count` sequences (the server's own count, not a delay)."""
    deadline = time.monotonic() + 60
    while sequence_gauge(url, "infera_sequence_backlog") != count:
        assert time.monotonic() < deadline, f"the backlog never held {count}"
        time.sleep(0.05)


def send_start_and_keep_the_socket(url: str, sid: int) -> socket.socket:
    """A client that sends a START and will go away without reading its answer."""
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        value(1), sequence_id=sid, sequence_start=True
    )
    host, port = url.split(":")
    head = (
        f"POST /v2/models/one_slot/infer HTTP/1.1\r\nHost: {url}\r\nContent-Type: application/octet-stream\r\n"
        f"Content-Length: {len(body)}\r\n"
        + (f"Inference-Header-Content-Length: {json_size}\r\n" if json_size is not None else "")
        + "\r\n"
    )
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(head.encode() + body)
    return sock


@pytest.mark.server
def test_forty_clients_that_start_and_disconnect_leave_the_backlog_and_a_start_is_served(served: Served):
    url = served.http_url
    with httpclient.InferenceServerClient(url, network_timeout=120) as client:
        client.infer("one_slot", value(1), sequence_id=1, sequence_start=True)  # holds the only slot
        sockets = [send_start_and_keep_the_socket(url, sid) for sid in range(100, 100 + BACKLOG)]
        wait_for_backlog(url, BACKLOG)
        with pytest.raises(InferenceServerException, match="INFERA_SEQUENCE_MAX_BACKLOG") as refused:
            client.infer("one_slot", value(1), sequence_id=2, sequence_start=True)
        assert refused.value.status() == "503"
        for sock in sockets:
            sock.close()
        wait_for_backlog(url, 0)
        assert sequence_gauge(url, "infera_sequences_live") == 1
        client.infer("one_slot", value(1), sequence_id=1, sequence_end=True)
        # the abandoned STARTs would each have taken the freed slot in turn and held it for an hour
        answer = client.infer("one_slot", value(5), sequence_id=2, sequence_start=True)
        assert int(answer.as_numpy("OUTPUT")[0, 0]) == 5
        client.infer("one_slot", value(0), sequence_id=2, sequence_end=True)


def send_large_start_and_keep_the_socket(url: str, sid: int) -> socket.socket:
    """A START whose body is over what uvicorn's protocol answers directly (its ASGI cycle reads it), then gone."""
    request = {
        "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [1]}],
        "parameters": {"sequence_id": sid, "sequence_start": True},
    }
    body = json.dumps(request).encode() + b" " * (128 * 1024)
    host, port = url.split(":")
    head = (
        f"POST /v2/models/one_slot/infer HTTP/1.1\r\nHost: {url}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(head.encode() + body)
    return sock


@pytest.mark.server
def test_a_large_start_whose_client_disconnects_leaves_the_backlog(served: Served):
    url = served.http_url
    with httpclient.InferenceServerClient(url, network_timeout=120) as client:
        client.infer("one_slot", value(1), sequence_id=5, sequence_start=True)  # holds the only slot
        sock = send_large_start_and_keep_the_socket(url, 6)
        wait_for_backlog(url, 1)
        sock.close()
        wait_for_backlog(url, 0)
        client.infer("one_slot", value(1), sequence_id=5, sequence_end=True)


@pytest.mark.server
def test_a_cancelled_grpc_start_leaves_the_backlog(served: Served):
    with httpclient.InferenceServerClient(served.http_url, network_timeout=120) as client:
        client.infer("one_slot", value(1), sequence_id=3, sequence_start=True)  # holds the only slot
        grpc = grpcclient.InferenceServerClient(served.grpc_url)
        try:
            call = grpc.async_infer(
                "one_slot", value(1, grpcclient), lambda result, error: None, sequence_id=4, sequence_start=True
            )
            wait_for_backlog(served.http_url, 1)
            call.cancel()
            wait_for_backlog(served.http_url, 0)
        finally:
            grpc.close()
        client.infer("one_slot", value(1), sequence_id=3, sequence_end=True)


@pytest.fixture(scope="module")
def two_per_caller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The accumulator with 8 slots, on a server that lets one caller have two sequences open."""
    repo = tmp_path_factory.mktemp("per-caller-repository")
    (repo / "eight_slots" / "1").mkdir(parents=True)
    config = ONE_SLOT_CONFIG.replace('name: "one_slot"', 'name: "eight_slots"').replace(
        "max_batch_size: 1", "max_batch_size: 8"
    )
    (repo / "eight_slots" / "config.pbtxt").write_text(config)
    (repo / "eight_slots" / "1" / "model.onnx").write_bytes(accumulator_onnx_bytes())
    log = tmp_path_factory.mktemp("per-caller-logs") / "uvicorn.log"
    with running_with_grpc(repo, log, {"INFERA_SEQUENCE_MAX_PER_CALLER": "2"}) as served:
        yield served


@pytest.mark.server
def test_a_caller_past_its_open_sequences_is_refused_on_http_and_grpc(two_per_caller: Served):
    with httpclient.InferenceServerClient(two_per_caller.http_url, network_timeout=120) as client:
        client.infer("eight_slots", value(1), sequence_id=1, sequence_start=True)
        client.infer("eight_slots", value(1), sequence_id=2, sequence_start=True)
        with pytest.raises(InferenceServerException, match="INFERA_SEQUENCE_MAX_PER_CALLER") as refused:
            client.infer("eight_slots", value(1), sequence_id=3, sequence_start=True)
        assert refused.value.status() == "429"
        client.infer("eight_slots", value(1), sequence_id=1, sequence_end=True)  # one ends: one may start
        client.infer("eight_slots", value(1), sequence_id=3, sequence_start=True, sequence_end=True)
        client.infer("eight_slots", value(1), sequence_id=2, sequence_end=True)
    grpc = grpcclient.InferenceServerClient(two_per_caller.grpc_url)
    try:
        grpc.infer("eight_slots", value(1, grpcclient), sequence_id=11, sequence_start=True)
        grpc.infer("eight_slots", value(1, grpcclient), sequence_id=12, sequence_start=True)
        with pytest.raises(InferenceServerException, match="INFERA_SEQUENCE_MAX_PER_CALLER") as refused:
            grpc.infer("eight_slots", value(1, grpcclient), sequence_id=13, sequence_start=True)
        assert refused.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        for sid in (11, 12):
            grpc.infer("eight_slots", value(1, grpcclient), sequence_id=sid, sequence_end=True)
    finally:
        grpc.close()
