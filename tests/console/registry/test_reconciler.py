"""The reconciler converges a real in-process engine on the database's desired state."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from console.registry.services import lookups, model_actions, new_versions, version_actions
from engine.serving.server import InferenceServer
from tests.console.registry.engine_helpers import (
    add,
    change,
    eventually,
    infer,
    reconcile_once,
    reconciler_for,
    register,
    served_version,
    states,
)

pytestmark = pytest.mark.django_db(transaction=True)


async def test_it_loads_what_should_serve_and_marks_it_ready(engine, operator, simple_onnx):
    await register(operator, "simple", [simple_onnx])
    assert await states("simple") == {1: ("PENDING", "")}
    await reconcile_once(engine)
    assert await states("simple") == {1: ("READY", "")}
    assert (await infer(engine)).model_version == 1


async def test_it_switches_the_served_version_on_activation_and_back(engine, operator, simple_onnx):
    await register(operator, "simple", [simple_onnx, simple_onnx])
    await reconcile_once(engine)
    assert served_version(engine) == 1
    assert (await infer(engine, version=2)).model_version == 2  # both versions load

    await change(version_actions.activate, operator, "simple", 2)
    await reconcile_once(engine)
    assert served_version(engine) == 2
    assert (await infer(engine)).model_version == 2

    await change(version_actions.activate, operator, "simple", 1)
    await reconcile_once(engine)
    assert (await infer(engine)).model_version == 1


async def test_it_unloads_a_version_nobody_wants(engine, operator, simple_onnx):
    await register(operator, "simple", [simple_onnx, simple_onnx])
    await reconcile_once(engine)
    await change(version_actions.unload_version, operator, "simple", 2)
    await reconcile_once(engine)
    assert await states("simple") == {1: ("READY", ""), 2: ("UNLOADED", "")}
    assert engine.model_ready("simple", 1)
    assert not engine.model_ready("simple", 2)

    await change(version_actions.load_version, operator, "simple", 2)
    await reconcile_once(engine)
    assert engine.model_ready("simple", 2)
    assert served_version(engine) == 1


async def test_a_version_that_fails_in_the_engine_is_failed_and_the_active_one_keeps_serving(
    engine, operator, simple_onnx, store
):
    await register(operator, "simple", [simple_onnx])
    await reconcile_once(engine)
    assert await add(operator, "simple", simple_onnx, activate=True) == 2
    (store / "simple" / "2" / "model.onnx").write_bytes(b"damaged after its trial load")
    await reconcile_once(engine)

    found = await states("simple")
    assert found[1] == ("READY", "")
    assert found[2][0] == "FAILED"
    assert "not a readable ONNX model" in found[2][1] or "onnxruntime could not load" in found[2][1]
    assert served_version(engine) == 1
    assert (await infer(engine)).model_version == 1

    await reconcile_once(engine)  # a FAILED version is not retried by itself
    assert (await states("simple"))[2][0] == "FAILED"


async def test_it_unloads_a_deleted_model(engine, operator, simple_onnx):
    await register(operator, "simple", [simple_onnx])
    await reconcile_once(engine)
    await sync_to_async(model_actions.delete_model)(operator, await sync_to_async(lookups.get_model)("simple"))
    await reconcile_once(engine)
    assert not engine.model_ready("simple")


async def test_a_restart_comes_back_serving_the_same_active_versions(engine, operator, simple_onnx, store):
    await register(operator, "simple", [simple_onnx, simple_onnx, simple_onnx])
    await register(operator, "other", [simple_onnx, simple_onnx])
    await reconcile_once(engine)
    await change(version_actions.activate, operator, "simple", 2)
    await change(version_actions.unload_version, operator, "simple", 3)
    await reconcile_once(engine)
    before = {name: served_version(engine, name) for name in ("simple", "other")}
    assert before == {"simple": 2, "other": 1}
    await engine.stop()

    restarted = InferenceServer(store)
    await restarted.start(load_models=False)
    try:
        await reconcile_once(restarted)
        assert {name: served_version(restarted, name) for name in ("simple", "other")} == before
        assert restarted.model_ready("simple", 1) and not restarted.model_ready("simple", 3)
        assert (await infer(restarted, "simple")).model_version == 2
    finally:
        await restarted.stop()


async def test_it_converges_from_what_start_up_loaded_from_the_store(operator, simple_onnx, store):
    await register(operator, "simple", [simple_onnx, simple_onnx])
    await change(version_actions.unload_version, operator, "simple", 2)
    server = InferenceServer(store)
    await server.start(load_models=True)  # the store's version policy serves the latest: version 2
    try:
        await reconcile_once(server)
        assert served_version(server) == 1
        assert not server.model_ready("simple", 2)
    finally:
        await server.stop()


async def test_the_loop_follows_a_change_message_without_waiting_for_its_period(engine, operator, simple_onnx):
    await register(operator, "simple", [simple_onnx, simple_onnx])
    reconciler_for(engine, period=3600).start()  # only the first pass and the message can act
    await eventually(lambda: engine.model_ready("simple", 2))
    assert served_version(engine) == 1
    await change(version_actions.activate, operator, "simple", 2)
    await eventually(lambda: served_version(engine) == 2)
    assert (await infer(engine)).model_version == 2


async def test_each_version_keeps_its_own_config_and_a_rollback_brings_it_back(engine, operator, simple_onnx, store):
    """The finding: activating a version with a new config made every version run with it, and rollback kept it."""
    from console.registry.uploads import parse_config_text
    from tests.console.registry.conftest import SIMPLE_PBTXT, model_file

    await register(operator, "simple", [simple_onnx], config=SIMPLE_PBTXT)
    smaller = parse_config_text(SIMPLE_PBTXT.replace("max_batch_size: 8", "max_batch_size: 2"))
    model = await sync_to_async(lookups.get_model)("simple")
    await sync_to_async(new_versions.add_version)(
        operator, model, model_file(simple_onnx), config=smaller, activate=True
    )
    await reconcile_once(engine)
    assert served_version(engine) == 2
    assert (engine.model_config("simple", 1).max_batch_size, engine.model_config("simple", 2).max_batch_size) == (8, 2)
    await change(version_actions.activate, operator, "simple", 1)
    await reconcile_once(engine)
    assert served_version(engine) == 1 and engine.model_config("simple").max_batch_size == 8
    assert "max_batch_size: 8" in (store / "simple" / "config.pbtxt").read_text()


async def test_it_passes_again_soon_after_losing_a_race_to_another_transaction(engine, monkeypatch):
    # two replicas recording at once with an activation deadlocked on PostgreSQL; taken for an outage, the next
    # pass waited a whole period and the replica kept serving the old version
    import psycopg
    from django.db import OperationalError

    from console.registry.reconciler import CONFLICT_RETRY_SECONDS

    reconciler = reconciler_for(engine)

    async def loses_a_race() -> None:
        try:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        except psycopg.Error as cause:
            raise OperationalError("deadlock detected") from cause

    monkeypatch.setattr(reconciler, "reconcile_once", loses_a_race)
    assert await reconciler._pass() == CONFLICT_RETRY_SECONDS
    assert reconciler.database.failures == 0  # not an outage
