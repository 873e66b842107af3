"""The soak's traffic: windows of latencies and failures, binary answers read back, and the checks of sequences."""

from __future__ import annotations

import itertools

import orjson

from bench.checked_load import Reply
from bench.sequence_runs import step_value
from bench.soak_traffic import SEQUENCE_STEPS, Window, binary_outputs, checked, json_outputs, sequences


def test_it_counts_latencies_and_failures_per_stream_in_a_window():
    window = Window(opened=10.0)
    for seconds in (0.001, 0.002, 0.003):
        window.answered("simple json", seconds)
    window.failed("digits binary", "HTTP 503")
    figures = window.figures(20.0)
    assert (figures["seconds"], figures["requests"], figures["errors"]) == (10.0, 3, 1)
    assert figures["streams"]["digits binary"] == {"requests": 0, "errors": 1, "p99_ms": None}
    assert figures["streams"]["simple json"]["requests"] == 3 and figures["examples"] == ["digits binary: HTTP 503"]


def test_it_reads_every_output_of_a_binary_answer():
    sizes = [{"name": "A", "parameters": {"binary_data_size": 8}}, {"name": "B", "parameters": {"binary_data_size": 4}}]
    head = orjson.dumps({"model_name": "m", "outputs": sizes})
    answer = Reply(200, {b"inference-header-content-length": str(len(head)).encode()}, head + b"\x01" * 8 + b"\x02" * 4)
    assert binary_outputs(answer) == {"A": b"\x01" * 8, "B": b"\x02" * 4}


def test_it_reports_an_unreadable_answer_as_wrong_instead_of_raising():
    check = checked(lambda reply: None if json_outputs(reply)["OUTPUT0"] == [1] else "wrong")
    assert check(Reply(200, {}, b'{"outputs":[{"name":"OUTPUT0","data":[1]}]}')) is None
    assert check(Reply(200, {}, b"<html>")).startswith("unreadable answer")


def answer_of(value: int) -> Reply:
    return Reply(200, {}, orjson.dumps({"outputs": [{"name": "OUTPUT", "data": [value]}]}))


def test_it_checks_running_sums_and_the_correlation_id_a_dyna_sequence_adds_at_its_end():
    calls = list(itertools.islice(sequences("simple_dyna_sequence")(), SEQUENCE_STEPS))
    sequence_id = orjson.loads(calls[0].body)["parameters"]["sequence_id"]
    total = 0
    for step, call in enumerate(calls):
        total += step_value(sequence_id, step)
        want = total + (sequence_id if step == SEQUENCE_STEPS - 1 else 0)
        assert call.check(answer_of(want)) is None
        assert call.check(answer_of(want + 1)) is not None
