"""The llm section: listed among the bench's sections, its report rendered from a recorded run, its goals checked."""

from __future__ import annotations

from bench.__main__ import SECTIONS, parse_args
from bench.llm_load import StreamRun, story_request
from bench.report import LLM_HEADING, write_outputs
from bench.report_llm import llm_verdicts


def _row(streams: int, tokens_per_s: float, ttft: float) -> dict:
    return {
        "streams": streams,
        "seconds": 20.0,
        "tokens": int(tokens_per_s * 20),
        "tokens_per_s": tokens_per_s,
        "ttft_p50_s": ttft,
        "ttft_p99_s": ttft * 2,
        "finished": streams * 2,
        "failures": 0,
        "short": 0,
        "error": "",
    }


def _run() -> dict:
    return {
        "model": "smollm2 (SmolLM2-135M-Instruct.Q4_1.gguf)",
        "max_tokens": 64,
        "seconds": 20.0,
        "cores": 2,
        "load_average": ["1.00 1.00 1.00", "2.00 2.00 2.00"],
        "date": "2026-12-01 00:00 UTC",
        "command": "python -m bench --sections llm",
        "infera": {
            "server": "manage.py serve --server uvicorn (access log on, defaults otherwise)",
            "launch": "console",
            "rows": [_row(1, 70.0, 0.05), _row(8, 200.0, 0.1), _row(32, 300.0, 2.0)],
            "prefix": {"prompt_tokens": 1000, "max_tokens": 8, "miss_s": 1.0, "hit_s": 0.1, "other_question_s": 0.2},
            "memory": {"started_mib": 900.0, "before_load_mib": 500.0, "loaded_mib": 900.0, "after_unload_mib": 600.0},
            "int4": {"rows": [_row(1, 45.0, 0.04)]},
        },
        "direct": {"batch": 32, "dtype": "bfloat16", "torch_threads": 2, "seconds": 10.0, "tokens_per_s": 204.8},
        "transformers": {"rows": [_row(1, 30.0, 0.2), _row(8, 64.0, 0.8), _row(32, 89.0, 4.1)], "command": "x"},
        "llama_cpp": {"unavailable": "pip install llama-cpp-python[server]==0.3.36 failed after 60 s: no compiler"},
    }


def test_the_llm_section_is_listed():
    assert "llm" in SECTIONS
    assert parse_args(["--sections", "llm"]).sections == ["llm"]


def test_every_side_gets_the_same_streamed_request():
    body = story_request("smollm2")
    assert body["max_tokens"] == 64 and body["stream"] and body["temperature"] == 0
    assert body["stream_options"] == {"include_usage": True}
    assert StreamRun(8).row()["ttft_p50_s"] is None


def test_its_goals_are_checked_against_the_peers_of_the_same_run():
    verdicts = {v.target: v for v in llm_verdicts({"llm": _run()})}
    assert verdicts["LLM tokens/s at 32 streams vs transformers serve"].status == "PASS"  # 300 / 89
    assert verdicts["LLM tokens/s at 32 streams vs direct generate (batch 32)"].status == "PASS"
    assert verdicts["LLM TTFT p50 at 8 streams vs transformers serve"].status == "PASS"  # 0.1 / 0.8
    assert verdicts["LLM TTFT on a prefix-cache hit vs the miss (1,000-token prompt)"].status == "PASS"
    one_stream = verdicts["LLM tokens/s on one stream vs llama.cpp server (same GGUF)"]
    assert one_stream.status == "N/A" and "no compiler" in one_stream.measured
    int4 = verdicts['LLM tokens/s on one stream, quantization "int4", vs llama.cpp server (same GGUF)']
    assert int4.status == "N/A" and "no compiler" in int4.measured
    ran = _run() | {"llama_cpp": {"rows": [_row(1, 60.0, 0.03)], "command": "x"}}
    verdicts = {v.target: v for v in llm_verdicts({"llm": ran})}
    assert verdicts["LLM tokens/s on one stream vs llama.cpp server (same GGUF)"].measured == "1.17×"  # 70 / 60
    assert verdicts['LLM tokens/s on one stream, quantization "int4", vs llama.cpp server (same GGUF)'].status == "MISS"
    memory = verdicts["LLM RSS after unload vs before load"]
    assert memory.status == "MISS" and memory.measured.startswith("+100 MiB")


def test_an_llm_only_run_leaves_the_rest_of_the_report(tmp_path):
    out = tmp_path / "benchmarks.md"
    out.write_text("# Benchmarks\n\nGenerated earlier.\n\n## Targets\n\nkept\n\n## GPU path (bench/gpu.sh)\n\ngpu\n")
    run = _run()
    results = {"date": run["date"], "command": run["command"], "system": {}, "settings": {}, "llm": run}
    write_outputs(results, out, tmp_path / "results", ["llm"])
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nGenerated earlier.\n\n## Targets\n\nkept\n\n## " + LLM_HEADING)
    assert text.endswith("## GPU path (bench/gpu.sh)\n\ngpu\n")
    assert "| Infera | 32 | 300 | 2.00 | 4.00 | 64 (0 short, 0 failed) |" in text
    assert '| Infera, quantization "int4" | 1 | 45 | 0.04 | 0.08 | 2 (0 short, 0 failed) |' in text
    assert "| transformers generate (direct, no server) | 32 | 205 | – | – | one batch in 10.0 s |" in text
    assert "not run: pip install llama-cpp-python[server]==0.3.36 failed" in text
    assert "| LLM tokens/s at 32 streams vs transformers serve | ≥ 3× | 3.37× | PASS |" in text
