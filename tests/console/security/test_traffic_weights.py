"""PUT /api/models/<m>/traffic refuses numbers out of range with 400 naming the field (issue 32, low: a canary weight
of 1e308 was stored and put in force), and a policy stored before the check breaks nothing."""

from __future__ import annotations

import pytest

from console.registry.models import ModelVersion, RegisteredModel, VersionState
from console.registry.services import lookups
from tests.console.registry import conftest as registry_cast
from tests.console.registry.conftest import model_file, upload

pytestmark = pytest.mark.django_db

store, as_operator = registry_cast.store, registry_cast.as_operator
models_dir, simple_onnx = registry_cast.models_dir, registry_cast.simple_onnx
URL = "/api/models/simple/traffic"


@pytest.fixture(autouse=True)
def two_versions(as_operator, simple_onnx):
    as_operator.post("/api/models/", {"name": "simple"}, format="json")
    for _ in range(2):
        assert upload(as_operator, "simple", model_file(simple_onnx)).status_code == 201
    ModelVersion.objects.update(state=VersionState.READY)


@pytest.mark.parametrize("weight", [1e308, -1, 100.5])
def test_it_refuses_a_canary_weight_out_of_range(as_operator, weight):
    answer = as_operator.put(URL, {"mode": "canary", "weights": {"1": 90, "2": weight}}, format="json")
    assert answer.status_code == 400, answer.content
    assert "the weight of version 2 must be from 0 to 100" in str(answer.json())
    assert RegisteredModel.objects.get(name="simple").traffic_policy in ({}, lookups.ACTIVE_POLICY)


def test_it_refuses_a_weight_that_is_no_number(as_operator):
    answer = as_operator.put(URL, {"mode": "canary", "weights": {"1": 90, "2": "NaN"}}, format="json")
    assert answer.status_code == 400 and answer.json() == {"weights": {"2": ["A valid number is required."]}}


def test_a_policy_stored_out_of_range_before_reads_as_active(as_operator):
    RegisteredModel.objects.filter(name="simple").update(traffic_policy={"mode": "canary", "weights": {"1": 1e308}})
    answer = as_operator.get(URL)
    assert answer.status_code == 200 and answer.json()["policy"]["mode"] == "active"
    assert as_operator.put(URL, {"mode": "active"}, format="json").status_code == 202
