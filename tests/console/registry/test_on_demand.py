"""On-demand models in the registry: the flags on the API, in the engine's configs, and the engine's loads and
evictions in the audit as its own actions."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from console.audit.models import AuditEvent
from console.registry.desired import with_memory_flags
from console.registry.models import RegisteredModel
from console.registry.services import lookups, model_actions
from tests.console.registry.engine_helpers import infer, reconcile_once, reconciler_for, register


@pytest.mark.django_db
def test_it_sets_on_demand_and_pinned_through_the_api(as_operator, as_viewer):
    as_operator.post("/api/models/", {"name": "digits"}, format="json")
    answer = as_operator.patch("/api/models/digits/", {"on_demand": True}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["on_demand"] is True and answer.json()["pinned"] is False
    assert answer.json()["description"] == ""  # left as it was
    event = AuditEvent.objects.filter(action="model.update", object="digits").latest("id")
    assert event.detail["on_demand"] == {"from": False, "to": True}
    assert as_viewer.patch("/api/models/digits/", {"pinned": True}, format="json").status_code == 403
    assert not RegisteredModel.objects.get(name="digits").pinned


@pytest.mark.django_db
def test_it_hands_the_flags_to_the_engine_as_config_parameters():
    model = RegisteredModel(name="digits", on_demand=True, pinned=True)
    config = {"name": "digits", "parameters": {"other": {"string_value": "1"}}}
    assert with_memory_flags(config, model)["parameters"] == {
        "on_demand": {"string_value": "true"},
        "pinned": {"string_value": "true"},
        "other": {"string_value": "1"},
    }
    assert with_memory_flags(config, RegisteredModel(name="digits")) is config


@pytest.mark.django_db(transaction=True)
async def test_it_loads_on_the_first_request_and_audits_the_engines_load(engine, operator, simple_onnx):
    await register(operator, "simple", [simple_onnx])
    model = await sync_to_async(lookups.get_model)("simple")
    await sync_to_async(model_actions.update_model)(operator, model, on_demand=True)
    reconciler = reconciler_for(engine)
    engine.on_memory_event = reconciler.memory_event  # as the Runtime wires it
    await reconcile_once(engine)
    memory = engine.status("simple").versions[1].memory
    assert memory.on_demand and not memory.resident
    assert (await infer(engine)).model_version == 1
    assert engine.status("simple").versions[1].memory.resident
    await reconciler.wait_for_records()
    event = await sync_to_async(AuditEvent.objects.get)(action="engine.load", object="simple")
    assert event.actor_name == "engine" and event.actor_id is None
    assert event.detail["version"] == 1 and event.detail["cold_start_ms"] >= 0
    assert "host" in event.detail["footprint_bytes"]
