"""bench.llm_structured: the two requests differ only by response_format; rounds summed into the ratio and its
verdict; the tables rendered from a recorded run."""

from __future__ import annotations

import pytest

from bench.llm_structured import bodies, markdown, summarize


def _row(number: int, mode: str, tokens: int, seconds: float, cpu_s: float) -> dict:
    return {
        "round": number,
        "mode": mode,
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "finished": tokens // 64,
        "short": 0,
        "failures": 0,
        "cpu_s": cpu_s,
        "load": "6.00 6.10 6.20",
    }


def test_it_sends_the_same_request_but_for_the_response_format():
    free, constrained = bodies().values()
    assert {key: value for key, value in constrained.items() if key != "response_format"} == free
    assert constrained["response_format"]["type"] == "json_schema"
    assert constrained["response_format"]["json_schema"]["schema"]["properties"]["summary"]["minLength"] > 64


@pytest.mark.parametrize(("structured_tokens", "verdict"), [(6144, "PASS"), (4096, "MISS")])
def test_it_sums_every_round_into_the_ratio_and_its_verdict(structured_tokens, verdict):
    rows = [
        _row(1, "free text", 6144, 30.0, 24.0),
        _row(1, "json_schema", structured_tokens, 32.0, 24.0),
        _row(2, "free text", 6144, 34.0, 24.0),
        _row(2, "json_schema", structured_tokens, 32.0, 24.0),
    ]
    summary = summarize(rows)
    free = summary["modes"]["free text"]
    assert free["tokens"] == 12288 and free["tokens_per_s"] == pytest.approx(12288 / 64.0)
    assert summary["ratio"] == pytest.approx(structured_tokens / 6144)
    per_round = structured_tokens / 32
    assert summary["round_ratios"] == pytest.approx([per_round / (6144 / 30), per_round / (6144 / 34)])
    assert summary["cpu_ratio"] == pytest.approx(structured_tokens / 6144)
    assert summary["verdict"] == verdict
    text = markdown(summary | {"rows": rows, "load_before": "1 2 3", "load_after": "4 5 6"})
    assert f"goal >= 0.8x: {verdict}" in text and "| 2 | json_schema |" in text
