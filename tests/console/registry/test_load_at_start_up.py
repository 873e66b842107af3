"""Triton's --load-model under explicit model control: the named registered models (or every one, `*`) are asked
to serve at start-up, audited as the engine's; names the registry does not know come back to be reported."""

from __future__ import annotations

import pytest

from console.audit.models import AuditEvent
from console.registry.models import ModelVersion
from console.registry.services import model_actions, new_versions, v2_actions
from engine.api import SYSTEM
from tests.console.registry.conftest import model_file

pytestmark = pytest.mark.django_db(transaction=True)


def unloaded(operator, *names: str, content: bytes) -> None:
    """Register each model with one version, none of them asked to serve."""
    for name in names:
        new_versions.add_version(operator, model_actions.register_model(operator, name), model_file(content))
    ModelVersion.objects.update(should_load=False)


def test_it_asks_the_named_models_to_serve_and_reports_the_unknown(operator, simple_onnx) -> None:
    unloaded(operator, "simple", "other", content=simple_onnx)
    assert v2_actions.load_at_start_up(("simple", "nope")) == ["nope"]
    serving = dict(ModelVersion.objects.values_list("model__name", "should_load"))
    assert serving == {"simple": True, "other": False}
    assert AuditEvent.objects.filter(action="v2.load", object="simple", actor_name=SYSTEM.name).exists()


def test_a_star_asks_every_registered_model_to_serve(operator, simple_onnx) -> None:
    unloaded(operator, "simple", "other", content=simple_onnx)
    assert v2_actions.load_at_start_up(("*",)) == []
    assert set(ModelVersion.objects.values_list("should_load", flat=True)) == {True}
