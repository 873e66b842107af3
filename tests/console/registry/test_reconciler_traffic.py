"""The reconciler puts each model's traffic policy in force on a real engine, after its versions converge; an
automatic rollback by the engine's guard is audited and becomes the desired state; a restart brings the policy back."""

from __future__ import annotations

import numpy as np
import pytest
from asgiref.sync import sync_to_async

from console.audit.models import AuditEvent
from console.hosting.runtime import Runtime
from console.registry.models import RegisteredModel
from console.registry.services import lookups, model_actions, new_versions, traffic_actions, version_actions
from console.registry.uploads import parse_config_text
from engine.serving.server import InferenceServer
from engine.settings import GrpcSettings
from engine.types import InferenceRequest
from tests.console.registry.conftest import model_file
from tests.console.registry.engine_helpers import (
    change,
    infer,
    reconcile_once,
    register,
    served_version,
)
from tests.engine.model_factory import python_config, to_pbtxt
from tests.engine.traffic.test_traffic import SCALE

pytestmark = pytest.mark.django_db(transaction=True)

# version 1 doubles X, version 2 triples it, version 3 fails on negative inputs (tests/engine/traffic/test_traffic.py)
SCALE_PBTXT = to_pbtxt(python_config("scale", [("X", "TYPE_FP32", [2])], [("Y", "TYPE_FP32", [2])])) + (
    'parameters { key: "EXECUTION_MODE" value { string_value: "in_process" } }\n'
)


@sync_to_async
def set_policy(actor, name: str, policy: dict) -> None:
    traffic_actions.set_traffic_policy(actor, lookups.get_model(name), policy)


@sync_to_async
def act(action, actor, name: str) -> None:
    """promote_traffic or rollback_traffic on a model."""
    action(actor, lookups.get_model(name))


@sync_to_async
def desired(name: str) -> dict:
    return RegisteredModel.objects.get(name=name).traffic_policy


@sync_to_async
def events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def in_force(server: InferenceServer, name: str = "simple") -> dict:
    return server.traffic_status(name)["policy"]


async def test_it_puts_the_desired_policy_in_force_and_takes_it_back(engine, operator, simple_onnx):
    await register(operator, "simple", [simple_onnx, simple_onnx])
    await reconcile_once(engine)
    await set_policy(operator, "simple", {"mode": "canary", "weights": {"1": 0, "2": 100}})
    assert in_force(engine)["mode"] == "active"  # desired state only, until the reconciler acts
    await reconcile_once(engine)
    assert in_force(engine) == await desired("simple")
    assert {(await infer(engine)).model_version for _ in range(5)} == {2}  # weight 0: no request for version 1
    assert (await infer(engine, version=1)).model_version == 1  # a request naming a version gets it

    await act(traffic_actions.rollback_traffic, operator, "simple")
    await reconcile_once(engine)
    assert in_force(engine)["mode"] == "active"
    assert {(await infer(engine)).model_version for _ in range(5)} == {1}


async def test_a_promotion_switches_the_active_version_and_ends_the_shadow(engine, operator, simple_onnx):
    await register(operator, "simple", [simple_onnx, simple_onnx])
    await reconcile_once(engine)
    await set_policy(operator, "simple", {"mode": "shadow", "candidate": 2})
    await reconcile_once(engine)
    assert in_force(engine)["candidate"] == 2
    await infer(engine)
    await act(traffic_actions.promote_traffic, operator, "simple")
    await reconcile_once(engine)
    assert served_version(engine) == 2
    assert in_force(engine)["mode"] == "active"


async def test_a_policy_gives_way_before_a_version_it_used_is_unloaded(engine, operator, simple_onnx):
    await register(operator, "simple", [simple_onnx, simple_onnx])
    await reconcile_once(engine)
    await set_policy(operator, "simple", {"mode": "canary", "weights": {"1": 50, "2": 50}})
    await reconcile_once(engine)
    # both changes land before the next pass: the engine still has the canary when version 2 should go
    await act(traffic_actions.rollback_traffic, operator, "simple")
    await change(version_actions.unload_version, operator, "simple", 2)
    await reconcile_once(engine)
    assert in_force(engine)["mode"] == "active"
    assert engine.model_ready("simple", 1) and not engine.model_ready("simple", 2)


async def test_a_restart_puts_the_policy_back_in_force(engine, operator, simple_onnx, store):
    await register(operator, "simple", [simple_onnx, simple_onnx])
    await reconcile_once(engine)
    await set_policy(operator, "simple", {"mode": "canary", "weights": {"1": 25, "2": 75}})
    await reconcile_once(engine)
    before = in_force(engine)
    await engine.stop()

    restarted = InferenceServer(store)
    await restarted.start(load_models=True)  # as the runtime starts: the store's models first, then the registry
    try:
        assert in_force(restarted)["mode"] == "active"
        await reconcile_once(restarted)
        assert in_force(restarted) == before
        assert {(await infer(restarted, version=n)).model_version for n in (1, 2)} == {1, 2}
    finally:
        await restarted.stop()


@pytest.fixture
async def runtime(settings, store):
    """The serving process's runtime over the test's store (its engine started, nothing loaded, nothing else)."""
    built = Runtime(settings.INFERA.replace(disable_nvml=True, grpc=GrpcSettings(port=0)))
    await built.server.start(load_models=False)
    yield built
    await built.reconciler.stop()
    await built.server.stop()


@sync_to_async
def register_scale(admin) -> None:
    """`scale` with versions 1, 2 and 3 (python: uploaded by an admin)."""
    model = model_actions.register_model(admin, "scale")
    config = parse_config_text(SCALE_PBTXT)
    for _ in range(3):
        new_versions.add_version(admin, model, model_file(SCALE.encode(), "model.py"), config=config)


async def test_an_automatic_rollback_is_audited_with_its_reason_and_becomes_the_desired_state(runtime, admin):
    engine, reconciler = runtime.server, runtime.reconciler  # wired together by the runtime
    await register_scale(admin)
    await reconciler.reconcile_once()
    policy = {"mode": "canary", "weights": {"1": 0, "3": 100}, "rollback_error_rate": 0.2, "rollback_min_requests": 5}
    await set_policy(admin, "scale", policy)
    await reconciler.reconcile_once()
    assert in_force(engine, "scale")["mode"] == "canary"

    negative = InferenceRequest("scale", {"X": np.full((1, 2), -1.0, np.float32)})
    for _ in range(5):
        with pytest.raises(Exception, match="no negatives"):
            await engine.infer(negative)
    assert in_force(engine, "scale")["mode"] == "active"  # the guard acted at once
    await reconciler.reconcile_once()  # whether or not the database has it yet, the canary stays out of force
    assert in_force(engine, "scale")["mode"] == "active"

    await reconciler.wait_for_records()
    assert (await desired("scale"))["mode"] == "active"
    (rollback,) = await events("traffic.rollback")
    assert rollback.actor_name == "system" and rollback.object == "scale"
    assert rollback.detail["automatic"] is True
    assert "the candidate failed 100% of 5 requests" in rollback.detail["reason"]
    assert rollback.detail["previous_policy"]["weights"] == {"1": 0.0, "3": 100.0}
    assert engine.traffic_status("scale")["rolled_back"] == rollback.detail["reason"]

    await reconciler.reconcile_once()
    assert in_force(engine, "scale")["mode"] == "active"
    response = await engine.infer(InferenceRequest("scale", {"X": np.ones((1, 2), np.float32)}))
    assert float(response.outputs["Y"][0, 0]) == 2.0  # the active version 1 answers

    await set_policy(admin, "scale", policy)  # asked for again, it is put in force again
    await reconciler.reconcile_once()
    assert in_force(engine, "scale")["mode"] == "canary"
