"""v2 repository load/unload change the registry's desired state, then wait for the engine to follow."""

from __future__ import annotations

import pytest

from console.registry.models import AuditEvent
from console.registry.reconciler import reconcile_once
from console.registry.v2_hooks import on_v2_load, on_v2_unload
from engine.errors import LoadError
from tests.console.registry.engine_helpers import register, served_version, states

pytestmark = pytest.mark.django_db(transaction=True)


async def test_unload_then_load_round_trips_through_the_desired_state(engine, operator, simple_onnx):
    await register(operator, "simple", [simple_onnx])
    await reconcile_once(engine)

    assert await on_v2_unload("simple", server=engine) is True
    assert not engine.model_ready("simple")
    assert await states("simple") == {1: ("UNLOADED", "")}
    await reconcile_once(engine)  # stays unloaded: the database says so
    assert not engine.model_ready("simple")

    assert await on_v2_load("simple", server=engine) is True
    assert served_version(engine) == 1
    assert await states("simple") == {1: ("READY", "")}
    actions = [a async for a in AuditEvent.objects.filter(action__startswith="v2.").values_list("action", flat=True)]
    assert sorted(actions) == ["v2.load", "v2.unload"]


async def test_load_reports_the_reason_when_the_version_fails(engine, operator, simple_onnx, store):
    await register(operator, "simple", [simple_onnx])
    (store / "simple" / "1" / "model.onnx").write_bytes(b"junk")
    with pytest.raises(LoadError, match="failed to load 'simple': version 1: "):
        await on_v2_load("simple", server=engine)


async def test_models_the_registry_does_not_know_are_left_to_the_engine(engine):
    assert await on_v2_load("unknown", server=engine) is False
    assert await on_v2_unload("unknown", server=engine) is False


async def test_loads_with_an_override_or_files_are_left_to_the_engine(engine, operator, simple_onnx):
    await register(operator, "simple", [simple_onnx])
    assert await on_v2_load("simple", server=engine, config='{"max_batch_size": 2}') is False
    assert await on_v2_load("simple", server=engine, files={"1/model.onnx": simple_onnx}) is False
