"""PUT /api/models/{name}/traffic refuses a canary or shadow whose candidate takes other inputs or gives other
outputs than the active version: 400, naming the tensor."""

from __future__ import annotations

import copy

import pytest

from console.audit.models import AuditEvent
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from tests.console.registry.conftest import model_file, upload

pytestmark = pytest.mark.django_db

URL = "/api/models/simple/traffic"


@pytest.fixture(autouse=True)
def two_kinds_of_version(as_operator, simple_onnx):
    """simple with versions 1 (active), 2 and 3, all READY as if the reconciler had loaded them; version 3 checked
    with INPUT0 of FP32 where the others take INT32."""
    as_operator.post("/api/models/", {"name": "simple"}, format="json")
    for _ in range(3):
        assert upload(as_operator, "simple", model_file(simple_onnx)).status_code == 201
    ModelVersion.objects.update(state=VersionState.READY)
    third = ModelVersion.objects.get(number=3)
    third.config = copy.deepcopy(third.config)
    third.config["input"][0]["data_type"] = "TYPE_FP32"
    third.save(update_fields=["config"])


@pytest.mark.parametrize(
    "policy", [{"mode": "canary", "weights": {"1": 90, "3": 10}}, {"mode": "shadow", "candidate": 3}]
)
def test_it_refuses_a_candidate_whose_inputs_differ_naming_the_tensor(as_operator, policy):
    answer = as_operator.put(URL, policy, format="json")
    assert answer.status_code == 400
    assert "version 3" in answer.json()["detail"] and "input 'INPUT0' has datatype FP32" in answer.json()["detail"]
    assert RegisteredModel.objects.get(name="simple").traffic_policy == {}
    assert not AuditEvent.objects.filter(action="traffic.set").exists()


def test_it_stores_a_canary_of_versions_that_take_the_same_requests(as_operator):
    answer = as_operator.put(URL, {"mode": "canary", "weights": {"1": 90, "2": 10}}, format="json")
    assert answer.status_code == 202, answer.content
