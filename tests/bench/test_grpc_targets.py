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
