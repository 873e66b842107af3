"""The gRPC targets when the gRPC section could not run: verdicts that say so, not a crash of the whole report."""

from __future__ import annotations

from bench.targets import grpc_verdicts

RESULTS = {
    "settings": {"models": ["simple"], "concurrencies": [1, 64]},
    "grpc": [{"unavailable": "h2load is not installed: apt-get install nghttp2-client"}],
    "http": [],
}


def test_it_reports_the_grpc_targets_as_not_measured_when_the_section_could_not_run() -> None:
    verdicts = grpc_verdicts(RESULTS)
    assert verdicts
    assert {v.status for v in verdicts} == {"N/A"}


def test_it_checks_the_default_profiles_grpc_against_its_own_http_server() -> None:
    def row(target: str, rps: float) -> dict:
        return {"target": target, "model": "simple", "concurrency": 64, "rps": rps, "errors": 0, "p50_ms": 1.0}

    http = [
        {**row(label, rps), "encoding": "binary"} for label, rps in (("infera-uvicorn", 9000), ("infera-default", 4000))
    ]
    results = {**RESULTS, "grpc": [row("infera-grpc", 3000), row("infera-grpc-default", 4400)], "http": http}
    verdicts = {v.target: v for v in grpc_verdicts(results)}
    assert verdicts["gRPC vs HTTP (binary), simple c=64"].status == "MISS"
    default = verdicts["gRPC (default settings) vs HTTP (binary), simple c=64"]
    assert (default.status, default.measured) == ("PASS", "1.10× (4400 vs 4000 req/s)")
    assert not any("default" in v.target for v in grpc_verdicts({**results, "grpc": [row("infera-grpc", 3000)]}))
