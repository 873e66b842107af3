"""/metrics of a real server (the engine's standalone uvicorn app) serving a tiny random Llama, after generations by the
official openai client: the LLM families parsed back by prometheus_client, counts equal to the tokens the answers
report, every request timed once, the running and waiting sequences back to 0 and the KV cache free again."""

from __future__ import annotations

import shutil
import urllib.request

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.engine.frontend.server_process import running_server
from tests.engine.llm.test_llm_backend import CONFIG

pytestmark = pytest.mark.server

PROMPTS = ("the quick brown fox", "a paged cache keeps keys and values in blocks", "the quick brown fox")
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def address(tiny_llama_folder, tmp_path_factory):
    repo = tmp_path_factory.mktemp("llm-metrics-repo")
    (repo / "tiny").mkdir()
    (repo / "tiny" / "config.pbtxt").write_text(CONFIG)
    shutil.copytree(tiny_llama_folder, repo / "tiny" / "1")
    log = tmp_path_factory.mktemp("llm-metrics-logs") / "uvicorn.log"
    with running_server("uvicorn", repo, log) as address:
        yield address


def scrape(address: str) -> dict[str, dict[str, float]]:
    """Each family's samples of model tiny, by sample name (and finish reason or bucket bound)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    values: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") == "tiny" and family.name.startswith("infera_llm_"):
                key = sample.labels.get("finish_reason") or sample.labels.get("le") or sample.name
                values.setdefault(family.name, {})[key] = sample.value
    return values


def test_it_counts_and_times_the_generations_of_an_llm(address):
    client = openai.OpenAI(base_url=f"http://{address}/v1", api_key="unused", max_retries=0, timeout=120)
    usages = []
    for prompt in PROMPTS:
        answer = client.completions.create(model="tiny", prompt=prompt, max_tokens=MAX_TOKENS, temperature=0)
        assert answer.choices[0].finish_reason == "length"
        usages.append(answer.usage)
    streamed = list(
        client.completions.create(model="tiny", prompt=PROMPTS[1], max_tokens=MAX_TOKENS, temperature=0, stream=True)
    )
    assert streamed[-1].choices[0].finish_reason == "length"
    requests = len(PROMPTS) + 1
    prompt_tokens = sum(u.prompt_tokens for u in usages) + usages[1].prompt_tokens
    generated = sum(u.completion_tokens for u in usages) + MAX_TOKENS
    assert generated == requests * MAX_TOKENS

    metrics = scrape(address)
    assert metrics["infera_llm_generation_tokens"]["infera_llm_generation_tokens_total"] == generated
    assert metrics["infera_llm_prompt_tokens"]["infera_llm_prompt_tokens_total"] == prompt_tokens
    assert metrics["infera_llm_requests_finished"] == {"length": requests}
    assert metrics["infera_llm_requests_running"]["infera_llm_requests_running"] == 0
    assert metrics["infera_llm_requests_waiting"]["infera_llm_requests_waiting"] == 0
    assert metrics["infera_llm_kv_cache_usage_ratio"]["infera_llm_kv_cache_usage_ratio"] == 0
    assert metrics["infera_llm_preemptions"]["infera_llm_preemptions_total"] == 0
    queries = metrics["infera_llm_prefix_cache_queries"]["infera_llm_prefix_cache_queries_total"]
    hits = metrics["infera_llm_prefix_cache_hits"]["infera_llm_prefix_cache_hits_total"]
    assert queries == prompt_tokens and 0 < hits < queries  # the repeated prompts found their full blocks
    for family, observations in (
        ("infera_llm_time_to_first_token_seconds", requests),
        ("infera_llm_queue_time_seconds", requests),
        ("infera_llm_e2e_request_latency_seconds", requests),
        ("infera_llm_inter_token_latency_seconds", generated - requests),
    ):
        samples = metrics[family]
        assert samples[f"{family}_count"] == samples["+Inf"] == observations, family
        assert samples[f"{family}_sum"] > 0 or family == "infera_llm_queue_time_seconds", family
        bounds = sorted((float(le), count) for le, count in samples.items() if le[0].isdigit())
        assert [count for _, count in bounds] == sorted(count for _, count in bounds), family  # cumulative
    ttft_sum = metrics["infera_llm_time_to_first_token_seconds"]["infera_llm_time_to_first_token_seconds_sum"]
    e2e_sum = metrics["infera_llm_e2e_request_latency_seconds"]["infera_llm_e2e_request_latency_seconds_sum"]
    assert ttft_sum < e2e_sum < 120 * requests
