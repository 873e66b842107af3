"""Triton's generate extension over real HTTP: /generate and /generate_stream on decoupled and plain models,
errors mid-stream, and a client that disconnects cancelling its request."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.engine.decoupled_models import build_decoupled_repository, make_decoupled_ensemble
from tests.engine.frontend.server_process import running_server
from tests.engine.model_factory import make_simple_onnx, make_simple_string


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    repo = build_decoupled_repository(tmp_path_factory.mktemp("generate-repo"))
    make_decoupled_ensemble(repo)  # repeat, then plus_one on each of its responses
    make_simple_onnx(repo, "simple")
    make_simple_string(repo, "simple_string")
    log = tmp_path_factory.mktemp("generate-logs") / "uvicorn.log"
    with running_server("uvicorn", repo, log) as address:
        yield f"http://{address}"


def post(url: str, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


async def events(url: str, path: str, body: dict) -> tuple[int, str, list[dict]]:
    async with aiohttp.ClientSession() as session, session.post(url + path, json=body) as answer:
        text = await answer.text()
    chunks = [chunk for chunk in text.split("\n\n") if chunk]
    assert all(chunk.startswith("data: ") for chunk in chunks), text
    return answer.status, answer.headers["content-type"], [json.loads(chunk[6:]) for chunk in chunks]


def stats(url: str, model: str) -> dict:
    with urllib.request.urlopen(f"{url}/v2/models/{model}/stats", timeout=10) as answer:
        return json.loads(answer.read())["model_stats"][0]


@pytest.mark.parametrize("model", ["repeat", "repeat_in_process"])
@pytest.mark.parametrize("count", [0, 1, 5])
def test_it_streams_one_event_per_response(url, model, count):
    values = list(range(40, 40 + count))
    status, content_type, received = asyncio.run(events(url, f"/v2/models/{model}/generate_stream", {"IN": values}))
    assert status == 200 and content_type == "text/event-stream; charset=utf-8"
    assert [event["OUT"] for event in received] == values
    assert [event["IDX"] for event in received] == list(range(count))
    assert all(event["model_name"] == model and event["model_version"] == "1" for event in received)


def test_an_ensemble_with_a_decoupled_step_streams_an_event_per_response(url):
    status, _, received = asyncio.run(events(url, "/v2/models/each_plus_one/generate_stream", {"IN": [10, 20, 30]}))
    assert status == 200
    assert sorted((event["INDEX"], event["RESULT"]) for event in received) == [(0, 11), (1, 21), (2, 31)]
    body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]}]}
    status, answer = post(url, "/v2/models/each_plus_one/infer", body)
    assert status == 400 and "decoupled" in answer["error"]


def test_it_sends_the_error_as_the_last_event(url):
    status, _, received = asyncio.run(
        events(url, "/v2/models/repeat/generate_stream", {"IN": [1, 2, 3], "parameters": {"fail_at": 1}})
    )
    assert status == 200  # the first response succeeded: the status is sent with it
    assert received == [
        {"model_name": "repeat", "model_version": "1", "OUT": 1, "IDX": 0},
        {"error": "element 1 failed on purpose"},
    ]


def test_a_failing_first_response_sets_the_status(url):
    status, _, received = asyncio.run(events(url, "/v2/models/raises/generate_stream", {"IN": [1]}))
    assert status == 500 and "this decoupled model cannot run" in received[0]["error"]


def test_generate_answers_a_model_with_one_response(url):
    status, answer = post(
        url,
        "/v2/models/simple_string/generate",
        {"id": "7", "INPUT0": [str(n) for n in range(16)], "INPUT1": ["1"] * 16},
    )
    assert status == 200, answer
    assert answer["id"] == "7" and answer["model_name"] == "simple_string" and answer["model_version"] == "1"
    assert answer["OUTPUT0"] == [str(n + 1) for n in range(16)]
    status, answer = post(url, "/v2/models/repeat/generate", {"IN": [5]})
    assert status == 200 and answer["OUT"] == 5


def test_generate_refuses_a_stream_of_several_responses(url):
    status, answer = post(url, "/v2/models/repeat/generate", {"IN": [1, 2]})
    assert status == 500 and "exactly 1 response" in answer["error"]


def test_generate_names_what_is_wrong_with_the_body(url):
    status, answer = post(url, "/v2/models/simple/generate", {"INPUT0": [1, 2, 3], "INPUT1": list(range(16))})
    assert status == 400 and "INPUT0" in answer["error"]
    status, answer = post(url, "/v2/models/repeat/generate_stream", {"IN": [1], "parameters": [1]})
    assert status == 400 and "Expected JSON object for keyword: 'parameters'" in answer["error"]
    status, answer = post(url, "/v2/models/repeat/generate", {"IN": [1], "nested": {"a": 1}})
    assert status == 400 and "parameter 'nested'" in answer["error"]


def test_infer_refuses_a_decoupled_model(url):
    body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]}]}
    status, answer = post(url, "/v2/models/repeat/infer", body)
    assert status == 400 and "decoupled" in answer["error"] and "generate_stream" in answer["error"]


def test_a_client_that_disconnects_cancels_its_request(url):
    async def leave_after_first_event() -> None:
        body = {"IN": [9], "parameters": {"until_cancelled": True}}
        async with (
            aiohttp.ClientSession() as session,
            session.post(url + "/v2/models/repeat/generate_stream", json=body) as answer,
        ):
            first = await answer.content.readuntil(b"\n\n")
            assert json.loads(first[6:])["OUT"] == 9
        # leaving the block closes the connection mid-stream

    before = stats(url, "repeat")["stream_stats"]
    asyncio.run(leave_after_first_event())
    deadline = time.monotonic() + 30
    while True:  # the model sees the cancellation and sends its last response, which ends the stream
        after = stats(url, "repeat")["stream_stats"]
        if after["cancelled"] == before["cancelled"] + 1:
            break
        assert time.monotonic() < deadline, after
        time.sleep(0.05)
    assert after["in_flight"] == 0
    # the first event, then the one the model sends only once request.is_cancelled() told it the client left
    assert after["responses"] == before["responses"] + 2
    assert in_flight_gauge(url, "repeat") == 0


def in_flight_gauge(url: str, model: str) -> float:
    """infera_streams_in_flight of a model's version 1 on /metrics."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "infera_streams_in_flight" and sample.labels == {"model": model, "version": "1"}:
                return sample.value
    raise AssertionError(f"no infera_streams_in_flight for {model} on /metrics")
