"""The HTTP targets: daphne against its own bare echo, MLServer with the same batching window as Infera."""

from __future__ import annotations

from pathlib import Path

from bench.mlserver_peer import batch_window_s
from bench.models import write_repository
from bench.report_throughput import ratio_table
from bench.targets import http_verdicts


def _row(target: str, model: str, rps: float) -> dict:
    row = {"target": target, "model": model, "encoding": "json", "concurrency": 64, "rps": rps, "errors": 0}
    return row | {"p50_ms": 1.0, "p99_ms": 2.0}


RESULTS = {
    "settings": {"models": ["simple"], "concurrencies": [64], "queue_delay_us": {"mlp_small": 100}},
    "http": [
        _row("echo-uvicorn", "simple", 40000),
        _row("echo-daphne", "simple", 6000),
        _row("infera-daphne", "simple", 3600),
        _row("infera-uvicorn", "simple", 18000),
    ],
}


def test_it_measures_daphne_against_a_bare_daphne_echo() -> None:
    verdicts = {v.target: v for v in http_verdicts(RESULTS, "infera-daphne")}
    own = verdicts["infera-daphne: simple c=64 vs bare echo-daphne"]
    assert (own.status, own.measured) == ("PASS", "0.60× (3600 vs 6000 req/s)")
    assert verdicts["infera-daphne: simple c=64 vs bare ASGI echo"].status == "MISS"  # 0.09× of uvicorn's echo
    assert not any("echo-daphne" in v.target for v in http_verdicts(RESULTS, "infera-uvicorn"))


def test_it_names_the_shared_batching_window_in_the_mlserver_goal() -> None:
    verdict = next(v for v in http_verdicts(RESULTS, "infera-uvicorn") if "MLServer" in v.target)
    assert verdict.goal == "≥ 5× (both batching windows 100 µs)"


def test_the_ratio_table_has_a_column_against_the_same_servers_echo() -> None:
    lines = ratio_table(RESULTS).splitlines()
    assert lines[0].endswith("/ same server's echo |")
    daphne = next(line for line in lines if line.startswith("| infera-daphne"))
    assert daphne.endswith("| 0.09 | 0.60 |")


def test_mlserver_waits_as_long_as_infera_batches(tmp_path: Path) -> None:
    repository = write_repository(tmp_path, ["simple", "mlp_small"], queue_delay_us=2000)
    assert batch_window_s(repository, "mlp_small") == 0.002
    assert batch_window_s(repository, "simple") == 0.0  # Infera sends at once: MLServer's batching is off


def test_a_run_of_the_http_section_rewrites_the_http_target_rows_it_measured(tmp_path: Path) -> None:
    from bench.report import write_outputs

    markdown = tmp_path / "benchmarks.md"
    old = "| infera-daphne: simple c=64 vs bare echo-daphne | ≥ 0.5× | 0.10× (old) | MISS |"
    kept = "| infera-daphne: mlp_large c=64 vs direct | ≥ 0.8× session.run at batch 64 | 0.31× (old) | MISS |"
    markdown.write_text(
        "# Benchmarks\n\n## Targets\n\n| target | goal | measured | result |\n| --- | --- | --- | --- |\n"
        f"{old}\n{kept}\n"
    )
    write_outputs(RESULTS, markdown, tmp_path / "results", only=["http"])
    text = markdown.read_text()
    assert "| infera-daphne: simple c=64 vs bare echo-daphne | ≥ 0.5× | 0.60× (3600 vs 6000 req/s) | PASS |" in text
    assert kept in text  # not measured in this run (no direct ceiling): its row stays


def test_it_holds_the_default_profile_to_the_tuned_one_on_both_bodies() -> None:
    binary = [
        _row(t, "mlp_small", r) | {"encoding": "binary"}
        for t, r in (("infera-uvicorn", 10000), ("infera-default", 8000))
    ]
    results = RESULTS | {
        "http": [_row("infera-uvicorn", "mlp_small", 9000), _row("infera-default", "mlp_small", 8500), *binary]
    }
    verdicts = {v.target: v for v in http_verdicts(results, "infera-default")}
    json_row = verdicts["infera-default: mlp_small c=64 (json) vs the tuned profile"]
    assert (json_row.status, json_row.goal) == ("PASS", "≥ 0.9× of infera-uvicorn")
    assert verdicts["infera-default: mlp_small c=64 (binary) vs the tuned profile"].status == "MISS"  # 0.80×
    assert not any("tuned profile" in v.target for v in http_verdicts(results, "infera-uvicorn"))
