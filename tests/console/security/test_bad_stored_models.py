"""A bad state stored by an earlier release never takes the server down (issue 32, high 1): two ensembles naming each
other, stored before cycles were refused. The engine starts and the reconciler passes, everything else serves, the
pair is FAILED with the cycle named, and the API deletes it, one member after the other."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import sync_to_async

from console.hosting.runtime import Runtime
from console.registry import ensemble_graph
from console.registry.models import RegisteredModel
from console.registry.services import model_actions, new_versions
from console.registry.uploads import parse_config_text
from engine.serving.server import InferenceServer
from engine.settings import GrpcSettings
from tests.conftest import manage_command, serve_process
from tests.console.registry import conftest as registry_cast
from tests.console.registry.conftest import ensemble_pbtxt
from tests.console.registry.engine_helpers import infer, reconcile_once, register, states, stop_reconciler
from tests.engine.model_factory import make_simple_onnx

pytestmark = pytest.mark.django_db(transaction=True)

# the registry tests' store per test, clients and model files
store, as_operator = registry_cast.store, registry_cast.as_operator
models_dir, simple_onnx = registry_cast.models_dir, registry_cast.simple_onnx


@pytest.fixture
async def stored_cycle(operator, simple_onnx, monkeypatch):
    """`simple`, and `ping` and `pong` calling each other, stored as the release before this check stored them."""
    await register(operator, "simple", [simple_onnx])
    with monkeypatch.context() as unchecked:
        unchecked.setattr(ensemble_graph, "cycle_problem", lambda *args, **kwargs: None)
        for name, calls in (("ping", "pong"), ("pong", "ping")):
            await sync_to_async(add_ensemble)(operator, name, calls)


def add_ensemble(actor, name: str, calls: str) -> None:
    model = model_actions.register_model(actor, name)
    new_versions.add_version(actor, model, None, config=parse_config_text(ensemble_pbtxt(name, model=calls)))


async def test_a_restart_serves_the_rest_and_fails_the_cycle_with_its_reason(stored_cycle, store):
    server = InferenceServer(store)
    await server.start(load_models=True, ready=False)  # as the runtime starts it: every model of the store
    try:
        await reconcile_once(server)
        server.set_ready()
        assert server.is_ready()
        assert (await infer(server)).model_name == "simple"
        assert await states("simple") == {1: ("READY", "")}
        (state, error), *_ = (await states("ping")).values()
        assert state == "FAILED" and "ensemble 'ping' -> 'pong' -> 'ping' is a cycle" in error
        (state, error), *_ = (await states("pong")).values()
        assert state == "FAILED" and "ensemble 'pong' -> 'ping' -> 'pong' is a cycle" in error
        await reconcile_once(server)  # and the next pass is as calm
    finally:
        await stop_reconciler(server)
        await server.stop()


async def test_a_reconcile_pass_fails_a_model_that_breaks_its_load_and_converges_the_rest(
    operator, simple_onnx, store, monkeypatch
):
    await register(operator, "simple", [simple_onnx])
    await register(operator, "other", [simple_onnx])
    server = InferenceServer(store)
    await server.start(load_models=False)
    real = server.load_model

    async def breaks_on_simple(name, **kwargs):
        if name == "simple":
            raise RecursionError("maximum recursion depth exceeded")
        return await real(name, **kwargs)

    monkeypatch.setattr(server, "load_model", breaks_on_simple)
    try:
        await reconcile_once(server)  # the pass goes on past the model that broke
        assert await states("other") == {1: ("READY", "")}
        assert await states("simple") == {1: ("FAILED", "RecursionError: maximum recursion depth exceeded")}
    finally:
        await stop_reconciler(server)
        await server.stop()


async def test_the_api_deletes_each_member_of_a_stored_cycle_unless_an_ensemble_outside_calls_it(
    stored_cycle, operator, as_operator
):
    await sync_to_async(add_ensemble)(operator, "outer", "ping")  # outer -> ping -> pong -> ping: outer is no member
    delete = sync_to_async(as_operator.delete)
    refused = await delete("/api/models/ping/")
    assert refused.status_code == 409
    assert refused.json()["ensembles"] == ["outer"]
    assert (await delete("/api/models/pong/")).status_code == 204  # its only caller, ping, is in the cycle with it
    assert (await delete("/api/models/outer/")).status_code == 204
    assert (await delete("/api/models/ping/")).status_code == 204
    assert not await RegisteredModel.objects.filter(name__in=["ping", "pong", "outer"]).aexists()


async def test_ready_answers_503_when_the_runtime_failed_to_start(settings, tmp_path, in_memory_layer):
    blocker = tmp_path / "store-is-a-file"
    blocker.write_text("not a folder")
    runtime = Runtime(settings.INFERA.replace(model_store=blocker, disable_nvml=True, grpc=GrpcSettings(port=0)))
    with pytest.raises(FileExistsError):
        await runtime.start()
    scope = {"type": "http", "method": "GET", "path": "/v2/health/ready", "headers": [], "client": ("10.0.0.1", 1)}
    assert (await runtime.v2.respond(scope, None, body=b"")).status == 503
    await runtime.stop()


# run by `manage.py shell`: ping and pong calling each other, stored as the release before the check stored them
STORE_CYCLE = """
from console.registry import ensemble_graph
from console.registry.services import model_actions, new_versions
from console.registry.uploads import parse_config_text
from tests.console.registry.conftest import ensemble_pbtxt
ensemble_graph.cycle_problem = lambda *args, **kwargs: None
for name, calls in (("ping", "pong"), ("pong", "ping")):
    model = model_actions.register_model(None, name)
    new_versions.add_version(None, model, None, config=parse_config_text(ensemble_pbtxt(name, model=calls)))
"""


@pytest.mark.server
def test_a_real_server_serves_on_and_restarts_over_a_stored_cycle(tmp_path):
    repo = tmp_path / "repo"
    make_simple_onnx(repo)
    var_dir, env = tmp_path / "var", {"INFERA_RECONCILE_SECONDS": "1", "INFERA_DISABLE_NVML": "1"}
    with serve_process(var_dir, "--no-seed", env=env) as server:
        manage = manage_command(var_dir, env)
        manage("import_repository", str(repo))
        manage("shell", "-c", STORE_CYCLE)
        assert server.wait_for("/v2/models/simple/ready") == 200
        deadline = time.monotonic() + 60
        while "is a cycle" not in server.log() and time.monotonic() < deadline:
            time.sleep(0.25)  # the running server's next passes meet the cycle
        assert "'pong' -> 'ping' -> 'pong' is a cycle" in server.log() or "'ping' -> 'pong' -> 'ping'" in server.log()
        assert server.get("/v2/health/ready")[0] == 200
    with serve_process(var_dir, "--no-seed", env=env) as server:  # a restart over the stored cycle
        assert server.wait_for("/v2/health/ready") == 200
        assert server.get("/v2/models/simple/ready")[0] == 200
        assert server.get("/v2/models/ping/ready")[0] == 400
        assert "RecursionError" not in server.log()
