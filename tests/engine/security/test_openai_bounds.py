"""Issue 32: a /v1 body is bounded before the loop works on it (its size, its stop list, every list it carries) and
every numeric field is checked by type and range, refused with OpenAI's 400 naming the param, never a 500."""

from __future__ import annotations

import http.client
import json

import orjson
import pytest

from engine.frontend.openai_fields import MAX_CHOICES, MAX_STOP_CHARS, MAX_STOPS
from engine.llm.text import StopMatcher
from tests.engine.decoupled_models import build_decoupled_repository
from tests.engine.frontend.server_process import running_server

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def address(tmp_path_factory):
    """A real server with the production body limit (64 MiB) for /v2, so /v1's own bound is what is tested."""
    repo = build_decoupled_repository(tmp_path_factory.mktemp("openai-bounds-repo"))
    log = tmp_path_factory.mktemp("openai-bounds-logs") / "uvicorn.log"
    with running_server("uvicorn", repo, log, {"INFERA_MAX_BODY_BYTES": str(64 * 1024 * 1024)}) as where:
        yield where


def post(address: str, path: str, body: bytes) -> tuple[int, dict]:
    host, port = address.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def complete(address: str, **fields) -> tuple[int, dict]:
    # the standard library's JSON, which writes integers past 64 bits as the attack sent them
    return post(address, "/v1/completions", json.dumps({"model": "text_echo", "prompt": "hi", **fields}).encode())


def chat(address: str, **fields) -> tuple[int, dict]:
    document = {"model": "text_echo", "messages": [{"role": "user", "content": "hi"}], **fields}
    return post(address, "/v1/chat/completions", json.dumps(document).encode())


def test_it_refuses_two_million_stop_strings_without_parsing_them(address):
    """The attack: 2 million stop strings (11 MB) stalled the loop for seconds on every token."""
    body = orjson.dumps({"model": "text_echo", "prompt": "hi", "stop": ["ab"] * 2_000_000})
    status, answer = post(address, "/v1/completions", body)
    assert status == 413 and "limit" in answer["error"]["message"]


def test_it_refuses_a_stop_list_longer_than_its_bound(address):
    status, answer = complete(address, stop=[f"s{i}" for i in range(MAX_STOPS + 1)])
    assert status == 400 and answer["error"]["param"] == "stop"
    assert answer["error"]["type"] == "invalid_request_error" and f"at most {MAX_STOPS}" in answer["error"]["message"]
    status, answer = complete(address, stop=["x"] * 100_000)  # within the body limit, far over the list's
    assert status == 400 and answer["error"]["param"] == "stop"


def test_it_refuses_a_stop_string_longer_than_its_bound(address):
    status, answer = complete(address, stop=["a" * (MAX_STOP_CHARS + 1)])
    assert status == 400 and answer["error"]["param"] == "stop"
    assert f"at most {MAX_STOP_CHARS} characters" in answer["error"]["message"]


def test_it_still_completes_with_a_full_stop_list(address):
    stops = ["z" * MAX_STOP_CHARS] * (MAX_STOPS - 1) + [" there"]
    status, answer = complete(address, prompt="hi there", stop=stops, max_tokens=50)
    assert status == 200 and answer["choices"][0]["text"] == "echo: hi"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", 2**31),
        ("max_tokens", 1e308),
        ("max_tokens", 0),
        ("max_tokens", -1),
        ("max_tokens", True),
        ("max_tokens", "5"),
        ("seed", 2**70),
        ("seed", -(2**70)),
        ("seed", 1.5),
        ("top_p", -5),
        ("top_p", 0),
        ("top_p", 1.5),
        ("top_p", True),
        ("temperature", -0.1),
        ("temperature", 2.5),
        ("temperature", "hot"),
        ("temperature", False),
        ("presence_penalty", 3),
        ("frequency_penalty", -2.5),
        ("n", 0),
        ("n", 10**9),
        ("n", MAX_CHOICES + 1),
        ("best_of", 2**40),
        ("logprobs", 6),
        ("logprobs", 1e308),
        ("stream", "yes"),
        ("echo", 1),
        ("logit_bias", {str(i): 1 for i in range(301)}),
        ("logit_bias", {"token": 1}),
        ("logit_bias", {"1": 1e308}),
        ("logit_bias", [1, 2]),
    ],
)
def test_it_refuses_a_numeric_field_out_of_type_or_range_with_400(address, field, value):
    """The attack: max_tokens 2^31 or 1e308, seed 2^70 and top_p -5 answered 500 (OverflowError)."""
    status, answer = complete(address, **{field: value})
    assert status == 400, answer
    assert answer["error"]["param"] == field and answer["error"]["type"] == "invalid_request_error"
    assert f"'{field}'" in answer["error"]["message"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("messages", [{"role": "user", "content": "x"}] * 2049),
        ("messages", [{"role": 5, "content": "x"}]),
        ("max_completion_tokens", 2**63),
        ("top_logprobs", 21),
        ("logprobs", 3),
        ("stop", {"not": "a list"}),
    ],
)
def test_a_chat_refuses_fields_out_of_bounds_with_400(address, field, value):
    status, answer = chat(address, **{field: value})
    assert status == 400, answer
    assert answer["error"]["param"] == field and field in answer["error"]["message"]


def test_it_accepts_every_field_at_its_bounds(address):
    fields = {"max_tokens": 50, "seed": 2**63 - 1, "top_p": 1, "temperature": 2, "n": 1, "best_of": 1}
    fields |= {"presence_penalty": -2, "frequency_penalty": 2, "logit_bias": {"50256": -100}}
    status, answer = complete(address, stream=False, echo=False, **fields)
    assert status == 200 and answer["choices"][0]["text"] == "echo: hi"
    status, answer = chat(address, max_completion_tokens=3, top_logprobs=0, logprobs=False, seed=-(2**63))
    assert status == 200 and answer["choices"][0]["message"]["content"] == "ech"


def test_the_stop_matcher_holds_back_only_what_could_still_begin_a_stop():
    matcher = StopMatcher(["abc", "x" * MAX_STOP_CHARS])
    sent = []
    for _ in range(10_000):  # a long generation: the held tail never grows past the longest stop
        text, stopped = matcher.feed("xa")
        sent.append(text)
        assert not stopped and len(matcher.held) < MAX_STOP_CHARS
    text, stopped = matcher.feed("bc and more")
    assert stopped and "".join(sent) + text == ("xa" * 10_000)[:-1]  # "abc" began at the last "a"
    pieces = StopMatcher(["stop"])
    assert pieces.feed("one st") == ("one ", False) and pieces.feed("o") == ("", False)
    assert pieces.feed("pper") == ("", True) and pieces.rest() == ""
    tail = StopMatcher(["stop"])
    assert tail.feed("a sto") == ("a ", False) and tail.rest() == "sto"
