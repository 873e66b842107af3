"""The profiles section (issue 38): the default profile held to the tuned one and gRPC to HTTP from interleaved
rounds, rendered with every round."""

from __future__ import annotations

from bench.report_comparisons import profiles_text
from bench.targets import profiles_verdicts


def _profile(http: list[float], grpc: list[float]) -> dict:
    return {"http_rps": sorted(http)[1], "grpc_rps": sorted(grpc)[1], "http_runs": http, "grpc_runs": grpc}


RUN = {
    "model": "mlp_small",
    "connections": 64,
    "seconds": 4.0,
    "rounds": 3,
    "date": "2026-12-05 02:40 UTC",
    "command": "python -m bench --sections profiles",
    "profiles": {
        "tuned": _profile([4000, 3000, 3500], [2000, 2100, 1900]),
        "default": _profile([3300, 3400, 3000], [2200, 2000, 2100]),
        "uploaded, no access log": _profile([4100, 4000, 3900], [2400, 2500, 2600]),
    },
}


def test_it_holds_the_default_profile_to_the_tuned_one_and_grpc_to_http() -> None:
    verdicts = {v.target: v for v in profiles_verdicts({"profiles": RUN})}
    http = verdicts["default settings vs tuned, mlp_small c=64, HTTP binary (interleaved)"]
    assert (http.status, http.measured) == ("PASS", "0.94× (3300 vs 3500 req/s)")
    assert verdicts["default settings vs tuned, mlp_small c=64, gRPC (interleaved)"].status == "PASS"  # 1.05×
    grpc = verdicts["gRPC vs HTTP binary, tuned settings, mlp_small c=64 (interleaved)"]
    assert (grpc.status, grpc.measured) == ("MISS", "0.57× (2000 vs 3500 req/s)")
    assert profiles_verdicts({}) == []
    assert {v.status for v in profiles_verdicts({"profiles": {"unavailable": "h2load missing"}})} == {"N/A"}


def test_it_renders_each_profiles_medians_and_rounds() -> None:
    text = profiles_text(RUN)
    assert "`python -m bench --sections profiles`" in text and "3 rounds of 4 s" in text
    assert "| default | 3300 | 2100 | 0.64 | 3300, 2200 / 3400, 2000 / 3000, 2100 |" in text
