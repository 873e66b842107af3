"""Traffic policies' numbers are finite and in range (issue 32, low): a canary weight of 1e308, inf, nan or -1 was
accepted and every draw of the router was nonsense; each field is refused naming it, wherever a policy is read."""

from __future__ import annotations

import pytest

from engine.errors import InvalidArgument
from engine.traffic.policies import TrafficPolicy, check_policy, policy_from_dict


@pytest.mark.parametrize("weight", [1e308, float("inf"), float("nan"), -1.0, 100.5])
def test_it_refuses_a_canary_weight_out_of_range(weight):
    with pytest.raises(InvalidArgument, match="the weight of version 2 must be from 0 to 100"):
        policy_from_dict({"mode": "canary", "weights": {"1": 90, "2": weight}})
    with pytest.raises(InvalidArgument, match="the weight of version 2 must be from 0 to 100"):
        check_policy("m", TrafficPolicy("canary", {1: 90.0, 2: weight}), {1, 2}, 1)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("shadow_share", float("nan"), "shadow_share must be in"),
        ("rollback_error_rate", float("nan"), "rollback_error_rate must be in"),
        ("rollback_p99_ms", float("inf"), "rollback_p99_ms must be"),
        ("rollback_window_seconds", 1e308, "rollback_window_seconds must be over 0 and at most 86400"),
        ("rollback_min_requests", 10**30, "rollback_min_requests must be from 1 to 1000000"),
    ],
)
def test_it_refuses_every_other_number_out_of_range(field, value, message):
    with pytest.raises(InvalidArgument, match=message):
        policy_from_dict({"mode": "canary", "weights": {"1": 90, "2": 10}, field: value})


def test_it_keeps_weights_in_range_as_shares():
    assert policy_from_dict({"mode": "canary", "weights": {"1": 0.9, "2": 0.1}}).weights == {1: 0.9, 2: 0.1}
    assert policy_from_dict({"mode": "canary", "weights": {"1": 100, "2": 0}}).weights == {1: 100.0, 2: 0.0}
