"""GET|PUT /api/models/{name}/traffic and POST .../traffic/promote, .../traffic/rollback: the desired traffic policy."""

from __future__ import annotations

import pytest

from console.audit.models import AuditEvent
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from console.registry.services import lookups, refusals, traffic_actions, v2_actions
from tests.console.registry.conftest import model_file, upload

pytestmark = pytest.mark.django_db

CANARY = {"mode": "canary", "weights": {"1": 90, "2": 10}}
URL = "/api/models/simple/traffic"


@pytest.fixture(autouse=True)
def three_versions(as_operator, simple_onnx):
    """simple with versions 1 (active), 2 and 3, the first two READY as if the reconciler had loaded them."""
    as_operator.post("/api/models/", {"name": "simple"}, format="json")
    for _ in range(3):
        assert upload(as_operator, "simple", model_file(simple_onnx)).status_code == 201
    ModelVersion.objects.filter(number__in=[1, 2]).update(state=VersionState.READY)


def stored() -> dict:
    return RegisteredModel.objects.get(name="simple").traffic_policy


def last_event(action: str) -> AuditEvent:
    return AuditEvent.objects.filter(action=action).order_by("-id").first()


def test_a_model_starts_with_every_request_on_its_active_version(as_viewer):
    answer = as_viewer.get(URL)
    assert answer.status_code == 200
    body = answer.json()
    assert body["policy"]["mode"] == "active" and body["policy"]["weights"] == {}
    assert body["active_version"] == 1 and body["ready_versions"] == [1, 2]
    assert body["promotion_candidate"] is None
    assert body["in_force"] is None and body["shadow"] is None  # no engine in this process
    assert as_viewer.get("/api/models/simple/").json()["traffic_mode"] == "active"


@pytest.mark.parametrize("slash", ["", "/"])
def test_it_stores_a_canary_audited_in_the_engines_form(as_operator, slash):
    answer = as_operator.put(URL + slash, CANARY, format="json")
    assert answer.status_code == 202, answer.content
    assert answer.json()["policy"]["weights"] == {"1": 90.0, "2": 10.0}
    assert answer.json()["promotion_candidate"] == 2
    assert stored()["mode"] == "canary" and stored()["weights"] == {"1": 90.0, "2": 10.0}
    assert stored()["rollback_min_requests"] == 20  # the engine's defaults filled in
    event = last_event("traffic.set")
    assert (event.actor_name, event.object) == ("otto", "simple")
    assert event.detail["policy"]["mode"] == "canary" and event.detail["previous_policy"]["mode"] == "active"


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        ({"mode": "canary", "weights": {"1": 50, "3": 50}}, "version 3 is not READY"),
        ({"mode": "canary", "weights": {"1": 50, "9": 50}}, "version 9 is not READY"),
        ({"mode": "canary", "weights": {"1": 100}}, "a canary needs weights for two or more versions"),
        ({"mode": "canary", "weights": {"1": -1, "2": 2}}, "the weight of version 1 must be from 0 to 100"),
        ({"mode": "shadow"}, "a shadow needs a candidate version"),
        ({"mode": "shadow", "candidate": 1}, "the candidate 1 is the active version"),
        ({"mode": "shadow", "candidate": 2, "shadow_share": 1.5}, "shadow_share must be in (0, 1], got 1.5"),
        ({"mode": "shadow", "candidate": 3}, "version 3 is not READY"),
        ({"mode": "canary", "weights": {"one": 1, "2": 1}}, "traffic policy: invalid literal"),
    ],
)
def test_it_refuses_a_policy_that_cannot_apply_with_the_reason(as_operator, policy, reason):
    answer = as_operator.put(URL, policy, format="json")
    assert answer.status_code == 400
    assert reason in answer.json()["detail"]
    assert stored() == {} and not AuditEvent.objects.filter(action="traffic.set").exists()


def test_it_refuses_unknown_fields_and_wrong_types(as_operator):
    unknown = as_operator.put(URL, {**CANARY, "wieghts": {}}, format="json")
    assert unknown.status_code == 400
    assert unknown.json()["non_field_errors"] == ["unknown traffic policy field(s): wieghts"]
    assert as_operator.put(URL, {"mode": "blue-green"}, format="json").status_code == 400
    assert as_operator.put(URL, {"mode": "shadow", "candidate": "two"}, format="json").status_code == 400
    assert as_operator.put(URL, [1, 2], format="json").status_code == 400


def test_viewers_read_but_may_not_change_traffic(as_viewer, viewer):
    assert as_viewer.put(URL, CANARY, format="json").status_code == 403
    assert as_viewer.post(URL + "/promote").status_code == 403
    assert as_viewer.post(URL + "/rollback").status_code == 403
    with pytest.raises(refusals.RegistryError, match="'vera' may not change the traffic of model 'simple'"):
        traffic_actions.set_traffic_policy(viewer, lookups.get_model("simple"), CANARY)
    assert stored() == {}


def test_an_unknown_model_is_404(as_operator):
    assert as_operator.get("/api/models/nothing/traffic").status_code == 404
    assert as_operator.put("/api/models/nothing/traffic", CANARY, format="json").status_code == 404
    assert as_operator.post("/api/models/nothing/traffic/promote").status_code == 404


def test_promote_makes_the_heaviest_other_version_of_a_canary_active(as_operator, store):
    as_operator.put(URL, {"mode": "canary", "weights": {"1": 30, "2": 70}}, format="json")
    answer = as_operator.post(URL + "/promote")
    assert answer.status_code == 202, answer.content
    assert answer.json()["active_version"] == 2 and answer.json()["policy"]["mode"] == "active"
    model = RegisteredModel.objects.get(name="simple")
    assert model.active_number == 2 and model.traffic_mode == "active"
    assert last_event("version.activate").object == "simple/2"
    promoted = last_event("traffic.promote")
    assert promoted.detail["version"] == 2 and promoted.detail["previous"] == 1
    assert promoted.detail["previous_policy"]["mode"] == "canary"
    assert (store / "simple" / "config.pbtxt").exists()


def test_promote_makes_a_shadows_candidate_active(as_operator):
    as_operator.put(URL, {"mode": "shadow", "candidate": 2, "shadow_share": 0.5}, format="json")
    assert as_operator.get(URL).json()["promotion_candidate"] == 2
    assert as_operator.post(URL + "/promote").status_code == 202
    assert RegisteredModel.objects.get(name="simple").active_number == 2


def test_rollback_puts_every_request_back_on_the_active_version(as_operator):
    as_operator.put(URL, CANARY, format="json")
    answer = as_operator.post(URL + "/rollback")
    assert answer.status_code == 202
    assert answer.json()["policy"]["mode"] == "active" and answer.json()["active_version"] == 1
    event = last_event("traffic.rollback")
    assert event.detail["automatic"] is False and event.detail["previous_policy"]["mode"] == "canary"


def test_promote_and_rollback_need_a_canary_or_a_shadow(as_operator):
    promote = as_operator.post(URL + "/promote")
    assert promote.status_code == 409
    assert promote.json()["detail"] == "model 'simple' has no canary or shadow candidate to promote"
    rollback = as_operator.post(URL + "/rollback")
    assert rollback.status_code == 409
    assert rollback.json()["detail"] == "model 'simple' has no canary or shadow to roll back"


def test_a_version_in_the_policy_cannot_be_unloaded_or_deleted(as_operator):
    as_operator.put(URL, {"mode": "shadow", "candidate": 2}, format="json")
    reason = "version 2 of model 'simple' is in its shadow traffic policy; change the policy before {} it"
    unload = as_operator.post("/api/models/simple/versions/2/unload")
    assert unload.status_code == 409 and unload.json()["detail"] == reason.format("unloading")
    delete = as_operator.delete("/api/models/simple/versions/2/")
    assert delete.status_code == 409 and delete.json()["detail"] == reason.format("deleting")
    activate = as_operator.post("/api/models/simple/versions/2/activate")
    assert activate.status_code == 409 and "candidate of its shadow traffic policy" in activate.json()["detail"]
    assert as_operator.post("/api/models/simple/versions/3/unload").status_code == 202  # not in the policy

    as_operator.post(URL + "/rollback")
    assert as_operator.post("/api/models/simple/versions/2/unload").status_code == 202


def test_an_automatic_rollback_is_audited_and_resets_the_desired_state(as_operator):
    as_operator.put(URL, CANARY, format="json")
    rolled = stored()
    traffic_actions.record_automatic_rollback("simple", rolled, "the candidate failed 100% of 5 requests")
    assert stored()["mode"] == "active"
    event = last_event("traffic.rollback")
    assert event.actor_name == "system"
    assert event.detail["automatic"] is True and event.detail["reason"] == "the candidate failed 100% of 5 requests"
    assert event.detail["previous_policy"] == rolled


def test_an_automatic_rollback_keeps_a_policy_changed_since(as_operator):
    as_operator.put(URL, CANARY, format="json")
    rolled = stored()
    as_operator.put(URL, {"mode": "shadow", "candidate": 2}, format="json")
    traffic_actions.record_automatic_rollback("simple", rolled, "too slow")
    assert stored()["mode"] == "shadow"
    assert last_event("traffic.rollback").detail["desired"] == "kept"


def test_a_v2_unload_ends_the_policy(as_operator, operator):
    as_operator.put(URL, CANARY, format="json")
    assert v2_actions.v2_unload(operator, "simple")
    assert stored()["mode"] == "active"
    assert last_event("v2.unload").detail["traffic_policy"]["mode"] == "canary"


def test_the_traffic_endpoints_are_in_the_openapi_schema(as_viewer):
    schema = as_viewer.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    assert {"get", "put"} <= set(paths["/api/models/{name}/traffic"])
    assert "post" in paths["/api/models/{name}/traffic/promote"]
    assert "post" in paths["/api/models/{name}/traffic/rollback"]
    assert "/api/models/{name}/traffic/" not in paths
    assert "TrafficPolicy" in schema["components"]["schemas"]


def test_it_refuses_a_shadow_for_a_decoupled_model_and_keeps_canaries(as_operator):
    """A decoupled model streams any number of responses: there is no one answer per request to compare."""
    ModelVersion.objects.filter(number=1).update(
        config={"name": "simple", "model_transaction_policy": {"decoupled": True}}
    )
    answer = as_operator.put(URL, {"mode": "shadow", "candidate": 2}, format="json")
    assert answer.status_code == 400
    reason = answer.json()["detail"]
    assert "'simple' is decoupled" in reason and "a canary can split its streams" in reason
    assert as_operator.put(URL, CANARY, format="json").status_code == 202
