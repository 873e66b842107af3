"""bench/llm_priority.py's pieces: the requests it sends, the waiting count it reads from /metrics, its p99."""

from __future__ import annotations

import httpx

from bench.llm_priority import body, p99, waiting


def test_it_sends_vllms_priority_only_when_it_names_one():
    assert body("hi", 4, -1)["priority"] == -1 and body("hi", 4, -1)["stream"] is True
    assert "priority" not in body("hi", 4, None)


def test_the_p99_of_twenty_samples_is_the_slowest():
    assert p99([float(i) for i in range(20)]) == 19.0
    assert p99([0.5]) == 0.5


async def test_it_reads_the_waiting_sequences_from_metrics():
    text = '# HELP x\ninfera_llm_requests_waiting{model="smollm2",version="1"} 16.0\n'
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=text))
    async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
        assert await waiting(client) == 16.0
