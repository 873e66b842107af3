"""The composed ASGI app (routing by type and path) and the runtime it owns (start order, stop, failures)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from console.hosting.composition import InferaApplication, is_engine_path
from console.hosting.runtime import START_ORDER, Runtime
from console.hosting.shutdown import Connections
from console.runtime_of import RUNTIME_KEY, runtime_of
from engine.frontend import Reply, Route
from engine.frontend.lifespan import ServiceLifespan
from engine.settings import GrpcSettings


class RecordingApp:
    """An ASGI app that notes the paths (and runtimes) it was given and answers 204."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.runtimes: list[object] = []

    async def __call__(self, scope, receive, send) -> None:
        self.paths.append(scope.get("path", ""))
        self.runtimes.append(scope.get(RUNTIME_KEY))
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})


class SlowStart:
    """A start step that waits until the test lets it finish, and a stop step that records it ran."""

    def __init__(self) -> None:
        self.may_finish = asyncio.Event()
        self.started = False
        self.stopped = False

    async def start(self) -> None:
        await self.may_finish.wait()
        self.started = True

    async def stop(self) -> None:
        self.stopped = True


def compose(steps: SlowStart | None = None) -> tuple[InferaApplication, RecordingApp, RecordingApp, RecordingApp]:
    steps = steps or SlowStart()
    django_app, ws_app, engine_app = RecordingApp(), RecordingApp(), RecordingApp()
    runtime = SimpleNamespace(
        lifespan=ServiceLifespan(steps.start, steps.stop, wait_for_start=False),
        engine_app=engine_app,
        v2=engine_app,  # the runtime's v2 app is the engine app's fallback; here both record into one
        connections=Connections(),
    )
    app = InferaApplication(django_app=django_app, websocket_app=ws_app, runtime=runtime)  # type: ignore[arg-type]
    return app, django_app, ws_app, engine_app


async def call(app: object, scope: dict) -> list[dict]:
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)  # type: ignore[operator]
    return sent


def test_it_knows_the_engine_paths():
    for path in (
        "/v2",
        "/v2/health/ready",
        "/v2/models/simple/infer",
        "/metrics",
        "/v1/models",
        "/v1/chat/completions",
        "/tokenize",
        "/detokenize",
    ):
        assert is_engine_path(path), path
    for path in ("/", "/v2x", "/v1x", "/api/models/", "/metricsx", "/static/v2/a.js", "/tokenizex"):
        assert not is_engine_path(path), path


async def test_it_sends_v2_requests_straight_to_the_v2_app():
    app, _, _, engine_app = compose()
    v2_app = app.runtime.v2 = RecordingApp()
    for path in ("/v2/models/simple/infer", "/v2", "/metrics", "/v1/models", "/v2x"):
        await call(app, {"type": "http", "path": path})
    assert v2_app.paths == ["/v2/models/simple/infer", "/v2"]
    assert engine_app.paths == ["/metrics", "/v1/models"]


class DirectV2:
    """The v2 app's side of direct answers: its routes for any path, and answers that note their scope."""

    def __init__(self) -> None:
        self.scopes: list[dict] = []

    def direct_route(self, path: str, method: str) -> Route | None:
        return Route("infer", method, model="simple")

    async def respond(self, scope: dict, body: bytes, route: Route) -> Reply:
        self.scopes.append(scope)
        return Reply(200, body)


async def test_it_answers_direct_requests_once_the_runtime_has_begun():
    steps = SlowStart()
    app, *_ = compose(steps)
    app.runtime.v2 = DirectV2()
    assert app.direct_route("/v2/models/simple/infer", "POST") is None  # not begun: the ASGI way starts it
    app.runtime.lifespan.begin()
    assert app.direct_route("/v2/models/simple/infer", "POST") == Route("infer", "POST", model="simple")
    steps.may_finish.set()
    await app.runtime.lifespan.begin()


async def test_it_counts_a_direct_request_and_hands_it_the_runtime():
    app, *_ = compose()
    v2 = app.runtime.v2 = DirectV2()
    seen: list[int] = []

    async def respond(scope: dict, body: bytes, route: Route) -> Reply:
        seen.append(app.runtime.connections.requests)
        return await DirectV2.respond(v2, scope, body, route)

    v2.respond = respond
    reply = await app.respond_direct({"type": "http", "headers": []}, b"{}", Route("infer", "POST"))
    assert reply.body == b"{}" and seen == [1] and app.runtime.connections.requests == 0
    assert v2.scopes[0][RUNTIME_KEY] is app.runtime


async def test_it_routes_by_type_and_path_and_hands_every_app_the_runtime():
    app, django_app, ws_app, engine_app = compose()
    for path in ("/v2/health/ready", "/metrics", "/accounts/login/", "/api/schema/"):
        await call(app, {"type": "http", "path": path})
    await call(app, {"type": "websocket", "path": "/ws/metrics/"})
    assert engine_app.paths == ["/v2/health/ready", "/metrics"]
    assert django_app.paths == ["/accounts/login/", "/api/schema/"]
    assert ws_app.paths == ["/ws/metrics/"]
    assert {id(r) for r in django_app.runtimes + ws_app.runtimes} == {id(app.runtime)}
    assert runtime_of({RUNTIME_KEY: app.runtime}) is app.runtime and runtime_of(None) is None


async def test_it_starts_the_runtime_in_the_background_and_stops_it_at_shutdown():
    steps = SlowStart()
    app, *_ = compose(steps)
    messages: asyncio.Queue[dict] = asyncio.Queue()
    replies: asyncio.Queue[dict] = asyncio.Queue()

    await messages.put({"type": "lifespan.startup"})
    lifespan = asyncio.create_task(app({"type": "lifespan"}, messages.get, replies.put))
    # start-up completes at once: the console answers while models are still loading
    assert await replies.get() == {"type": "lifespan.startup.complete"}
    assert not steps.started
    steps.may_finish.set()
    await app.runtime.lifespan.begin()
    assert steps.started
    await messages.put({"type": "lifespan.shutdown"})
    await lifespan
    assert await replies.get() == {"type": "lifespan.shutdown.complete"}
    assert steps.stopped


async def test_it_starts_the_runtime_on_the_first_connection_without_lifespan():
    steps = SlowStart()
    steps.may_finish.set()
    app, django_app, *_ = compose(steps)
    await call(app, {"type": "http", "path": "/accounts/login/"})
    await app.runtime.lifespan.begin()
    assert steps.started and django_app.paths == ["/accounts/login/"]


@pytest.mark.django_db(transaction=True)
async def test_the_runtime_starts_in_its_stated_order_and_stops_in_reverse(settings, tmp_path, in_memory_layer):
    runtime = Runtime(
        settings.INFERA.replace(model_store=tmp_path / "new-store", disable_nvml=True, grpc=GrpcSettings(port=0))
    )
    await runtime.start()
    try:
        # gRPC is off here, and a process alone joins no peers
        assert runtime.started == [step for step in START_ORDER if step not in ("peers", "grpc", "poll")]
        assert (tmp_path / "new-store").is_dir() and runtime.state == "ready" and runtime.server.is_ready()
        assert runtime.sampler.running
    finally:
        await runtime.stop()
    assert runtime.started == [] and not runtime.server.is_ready() and not runtime.sampler.running


@pytest.mark.parametrize(("listen_host", "frozen"), [("127.0.0.1", True), (None, False)])
def test_only_the_runtime_serve_builds_freezes_its_start_up_objects(settings, listen_host, frozen):
    # `serve` names where it listens; a runtime built in a test or a script leaves the collector alone
    runtime = Runtime(settings.INFERA.replace(disable_nvml=True), listen_host=listen_host)
    assert runtime.lifespan.serving_process is frozen


@pytest.mark.django_db(transaction=True)
async def test_the_runtime_drains_before_it_stops(settings, tmp_path, in_memory_layer):
    runtime = Runtime(
        settings.INFERA.replace(
            model_store=tmp_path / "store", disable_nvml=True, grpc=GrpcSettings(port=0), shutdown_grace_seconds=7
        )
    )
    await runtime.start()
    try:
        assert runtime.grace_left() == 7.0  # no shutdown yet: the whole grace
        await runtime.drain()
        assert runtime.state == "stopping" and not runtime.server.is_ready() and runtime.connections.draining
        assert "follow" not in runtime.started  # the reconciler has stopped: no model changes while draining
        assert 0 < runtime.grace_left() <= 7
    finally:
        await runtime.stop()
    assert runtime.started == []


@pytest.mark.django_db(transaction=True)
async def test_it_drains_past_a_step_that_never_stops_once_the_grace_is_over(
    settings, tmp_path, in_memory_layer, caplog
):
    # a replica under load once hung after SIGTERM in its drain, never answering its requests or exiting
    runtime = Runtime(
        settings.INFERA.replace(
            model_store=tmp_path / "store", disable_nvml=True, grpc=GrpcSettings(port=0), shutdown_grace_seconds=0
        )
    )
    await runtime.start()
    stop_reconciler, never = runtime.reconciler.stop, asyncio.Event()
    runtime.reconciler.stop = never.wait  # a stop that never returns (a database call that never answers, say)
    try:
        async with asyncio.timeout(30):  # only a drain that waits on the step forever reaches this
            await runtime.drain()
        assert runtime.connections.draining  # the steps after the hung one ran
        assert "the reconciler had not stopped at the end of the shutdown grace" in caplog.text
    finally:
        never.set()
        await stop_reconciler()
        await runtime.stop()
    assert runtime.started == []


@pytest.mark.django_db(transaction=True)
async def test_the_runtime_records_why_it_failed_to_start(settings, tmp_path, in_memory_layer):
    blocker = tmp_path / "store-is-a-file"
    blocker.write_text("not a folder")
    runtime = Runtime(settings.INFERA.replace(model_store=blocker, disable_nvml=True, grpc=GrpcSettings(port=0)))
    with pytest.raises(FileExistsError):
        await runtime.start()
    assert runtime.state == "failed" and runtime.startup_failure.startswith("FileExistsError")
    await runtime.stop()
