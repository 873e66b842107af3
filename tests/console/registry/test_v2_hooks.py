"""v2 repository load/unload change the registry's desired state, then wait for the engine to follow."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from console.accounts.principals import principal_for
from console.audit.models import AuditEvent
from console.registry.models import ModelVersion
from console.registry.v2_hooks import RegistryRepositoryControl
from engine.errors import Forbidden, LoadError
from tests.console.registry.engine_helpers import (
    reconcile_once,
    reconciler_for,
    register,
    served_version,
    states,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def control(engine) -> RegistryRepositoryControl:
    return RegistryRepositoryControl(reconciler_for(engine))


async def caller(user):
    from asgiref.sync import sync_to_async

    return await sync_to_async(principal_for)(user)


async def test_unload_then_load_round_trips_through_the_desired_state(engine, control, operator, simple_onnx):
    await register(operator, "simple", [simple_onnx])
    await reconcile_once(engine)
    who = await caller(operator)

    assert await control.unload("simple", caller=who) is True
    assert not engine.model_ready("simple")
    assert await states("simple") == {1: ("UNLOADED", "")}
    await reconcile_once(engine)  # stays unloaded: the database says so
    assert not engine.model_ready("simple")

    assert await control.load("simple", config=None, files=None, caller=who) is True
    assert served_version(engine) == 1
    assert await states("simple") == {1: ("READY", "")}
    actions = [a async for a in AuditEvent.objects.filter(action__startswith="v2.").values_list("action", flat=True)]
    assert sorted(actions) == ["v2.load", "v2.unload"]


async def test_load_reports_the_reason_when_the_version_fails(engine, control, operator, simple_onnx, store):
    await register(operator, "simple", [simple_onnx])
    (store / "simple" / "1" / "model.onnx").write_bytes(b"junk")
    with pytest.raises(LoadError, match="failed to load 'simple': version 1: "):
        await control.load("simple", config=None, files=None, caller=await caller(operator))


async def test_models_the_registry_does_not_know_are_left_to_the_engine(control, operator):
    who = await caller(operator)
    assert await control.load("unknown", config=None, files=None, caller=who) is False
    assert await control.unload("unknown", caller=who) is False
    assert await control.load("unknown", config=None, files={PurePosixPath("1/model.onnx"): b""}, caller=who) is False


async def test_files_for_a_registered_model_become_a_new_audited_version(
    engine, control, operator, simple_onnx, mlp_onnx
):
    """The attack: a /v2 load with files silently replaced what a registered model served, with no trace."""
    await register(operator, "simple", [simple_onnx])
    await reconcile_once(engine)
    files = {PurePosixPath("1/model.onnx"): simple_onnx}
    assert await control.load("simple", config={"max_batch_size": 4}, files=files, caller=await caller(operator))
    assert served_version(engine) == 2
    assert await states("simple") == {1: ("READY", ""), 2: ("READY", "")}
    version = await ModelVersion.objects.select_related("model").aget(model__name="simple", number=2)
    assert version.is_active and version.config["max_batch_size"] == 4 and version.notes == "loaded through /v2"
    uploaded = await AuditEvent.objects.aget(action="version.upload", object="simple/2")
    assert uploaded.actor_name == operator.username and uploaded.detail["sha256"] == version.sha256


async def test_a_config_for_a_registered_model_becomes_a_new_version_and_the_old_one_keeps_its_own(
    engine, control, operator, simple_onnx
):
    await register(operator, "simple", [simple_onnx])
    await reconcile_once(engine)
    assert await control.load("simple", config={"max_batch_size": 2}, files=None, caller=await caller(operator))
    assert served_version(engine) == 2
    assert engine.model_config("simple", 2).max_batch_size == 2
    assert engine.model_config("simple", 1).max_batch_size == 4  # each version runs with its own config


async def test_code_sent_for_a_registered_model_needs_an_admin(control, operator, simple_onnx):
    await register(operator, "simple", [simple_onnx])
    files = {PurePosixPath("1/model.py"): b"class TritonPythonModel:\n    pass\n"}
    with pytest.raises(Forbidden, match="only admins may upload python-backend models"):
        await control.load("simple", config={"backend": "python"}, files=files, caller=await caller(operator))
    assert await states("simple") == {1: ("PENDING", "")}
