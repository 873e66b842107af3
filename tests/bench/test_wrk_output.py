"""The wrk Lua script and the parse of what its done() prints."""

from __future__ import annotations

import pytest

from bench.wrk import median_run, parse_output, write_script

SAMPLE = """Running 2s test @ http://127.0.0.1:8000/v2/models/simple/infer
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     5.64ms    1.20ms  12.15ms   80.00%
  21266 requests in 2.00s, 6.92MB read
BENCH_RESULT {"requests":21266,"duration_us":2000321,"bytes":7256000,"p50_us":5639.0,"p90_us":7100.5,\
"p99_us":12154.0,"mean_us":5640.2,"max_us":15001.0,"connect":0,"read":1,"write":0,"status":3,"timeout":2}
Requests/sec:  10631.32
"""


def test_it_parses_throughput_percentiles_and_errors():
    run = parse_output(SAMPLE)
    assert run.requests == 21266
    assert run.rps == pytest.approx(21266 / 2.000321)
    assert (run.p50_us, run.p99_us) == (5639.0, 12154.0)
    assert (run.status_errors, run.socket_errors, run.errors) == (3, 3, 6)


def test_it_takes_medians_and_sums_errors():
    run = parse_output(SAMPLE)
    row = median_run([run, run, run])
    assert row["p50_ms"] == pytest.approx(5.639) and row["errors"] == 18


def test_it_says_when_wrk_printed_no_result():
    with pytest.raises(ValueError, match="no result line"):
        parse_output("unable to connect to 127.0.0.1:1 Connection refused")


def test_it_writes_a_lua_script_with_the_body_and_triton_headers(tmp_path):
    script = write_script(tmp_path, "simple-binary", b"{}\x00\x01", {"Inference-Header-Content-Length": "2"})
    text = script.read_text()
    assert 'wrk.headers["Inference-Header-Content-Length"] = "2"' in text
    assert (tmp_path / "simple-binary.body").read_bytes() == b"{}\x00\x01"
    assert "function done(summary, latency, requests)" in text
