"""The LLM panel in headless Chromium: a console serving a tiny random Llama (imported from the shell), whose page
fills KV-cache usage, running and waiting sequences and the prefix-cache hit rate from its live feed after a few
completions; the numbers are the ones /metrics gives."""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.conftest import ServerProcess, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.server]

WAIT_MS = 30_000
PROMPT = "the scheduler plans each step on an explicit clock and"


def complete(server: ServerProcess, prompt: str) -> dict:
    body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 4, "temperature": 0}).encode()
    request = urllib.request.Request(
        server.base_url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


def field(page, name: str) -> str:
    return page.inner_text(f'#llm-metrics [data-live-field="{name}"]')


def test_it_shows_the_kv_cache_sequences_and_hit_rate_live(llm_server: ServerProcess, page):
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, llm_server)
    page.goto(llm_server.base_url + "/models/tiny/#monitoring")
    page.wait_for_selector("#llm-metrics")
    for _ in range(2):  # the same prompt twice: the second finds its full blocks in the prefix cache
        assert complete(llm_server, PROMPT)["choices"][0]["finish_reason"] == "length"
    hit_rate = '#llm-metrics [data-live-field="llm.prefix_cache_hit_rate"]'
    page.wait_for_function(
        f"() => /^[1-9][0-9.]*%$/.test(document.querySelector('{hit_rate}').textContent)", timeout=WAIT_MS
    )
    assert field(page, "llm.running") == "0" and field(page, "llm.waiting") == "0"
    assert field(page, "llm.kv_cache_usage") == "0.0%"  # every block back in the pool (cached blocks are free)
    assert field(page, "llm.preemptions") == "0"
    assert page.get_attribute(hit_rate, "data-live-state") == "live"
    with urllib.request.urlopen(llm_server.base_url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    assert 'infera_llm_requests_running{model="tiny",version="1"} 0' in text
    assert 'infera_llm_requests_finished_total{finish_reason="length",model="tiny",version="1"} 2' in text
    assert errors == []
