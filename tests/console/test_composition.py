"""The composed ASGI app: routing by type and path, and the engine's start and stop with the process."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from console import engine_link
from console.composition import InferaApplication, is_engine_path


class RecordingApp:
    """An ASGI app that notes the paths it was given and answers 204."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, scope, receive, send) -> None:
        self.paths.append(scope.get("path", ""))
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})


class SlowStartServer:
    """Just the lifecycle surface of an InferenceServer; start() waits until the test lets it finish."""

    def __init__(self) -> None:
        self.may_finish = asyncio.Event()
        self.started = False
        self.stopped = False

    async def start(self, load_models: bool = True) -> None:
        await self.may_finish.wait()
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    def is_live(self) -> bool:
        return True

    def is_ready(self) -> bool:
        return self.started


@pytest.fixture(autouse=True)
def restore_link(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # hooks other apps register (the metrics sampler, the reconciler) need a real server, not this stand-in
    monkeypatch.setattr(engine_link, "_started_hooks", [])
    monkeypatch.setattr(engine_link, "_stopping_hooks", [])
    saved = engine_link.server_or_none()
    yield
    engine_link.set_server(saved)
    engine_link.set_startup_failure(None)


def compose(server: object | None = None) -> tuple[InferaApplication, RecordingApp, RecordingApp, RecordingApp]:
    django_app, ws_app, engine_app = RecordingApp(), RecordingApp(), RecordingApp()
    app = InferaApplication(django_app=django_app, websocket_app=ws_app, engine_app=engine_app, server=server)
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
    for path in ("/v2", "/v2/health/ready", "/v2/models/simple/infer", "/metrics"):
        assert is_engine_path(path), path
    for path in ("/", "/v2x", "/api/models/", "/metricsx", "/static/v2/a.js"):
        assert not is_engine_path(path), path


async def test_it_routes_by_type_and_path():
    app, django_app, ws_app, engine_app = compose()
    for path in ("/v2/health/ready", "/metrics", "/accounts/login/", "/api/schema/"):
        await call(app, {"type": "http", "path": path})
    await call(app, {"type": "websocket", "path": "/ws/metrics/"})
    assert engine_app.paths == ["/v2/health/ready", "/metrics"]
    assert django_app.paths == ["/accounts/login/", "/api/schema/"]
    assert ws_app.paths == ["/ws/metrics/"]


async def test_it_starts_the_engine_in_the_background_and_stops_it_at_shutdown():
    server = SlowStartServer()
    app, *_ = compose(server)
    assert engine_link.get_server() is server
    messages: asyncio.Queue[dict] = asyncio.Queue()
    replies: asyncio.Queue[dict] = asyncio.Queue()

    await messages.put({"type": "lifespan.startup"})
    lifespan = asyncio.create_task(app({"type": "lifespan"}, messages.get, replies.put))
    # start-up completes at once: the console answers while models are still loading
    assert await replies.get() == {"type": "lifespan.startup.complete"}
    assert not server.started
    server.may_finish.set()
    await app.begin_startup()
    assert server.started and server.is_ready()
    await messages.put({"type": "lifespan.shutdown"})
    await lifespan
    assert await replies.get() == {"type": "lifespan.shutdown.complete"}
    assert server.stopped


async def test_it_starts_the_engine_on_the_first_connection_without_lifespan():
    server = SlowStartServer()
    server.may_finish.set()
    app, django_app, *_ = compose(server)
    await call(app, {"type": "http", "path": "/accounts/login/"})
    await app.begin_startup()
    assert server.started and django_app.paths == ["/accounts/login/"]


async def test_it_records_why_the_engine_failed_to_start():
    class BrokenServer(SlowStartServer):
        async def start(self, load_models: bool = True) -> None:
            raise OSError("model store unreadable")

    app, *_ = compose(BrokenServer())
    with pytest.raises(OSError):
        await app.begin_startup()
    await asyncio.sleep(0)  # done-callbacks run on the next turn of the loop
    assert engine_link.startup_failure() == "OSError: model store unreadable"


async def test_it_runs_hooks_after_start_and_before_stop():
    server = SlowStartServer()
    server.may_finish.set()
    app, *_ = compose(server)
    calls: list[str] = []

    @engine_link.on_engine_started
    async def after_start(started: object) -> None:
        calls.append(f"started ready={started.is_ready()}")  # type: ignore[attr-defined]

    @engine_link.on_engine_stopping
    async def before_stop(stopping: object) -> None:
        calls.append(f"stopping stopped={stopping.stopped}")  # type: ignore[attr-defined]

    @engine_link.on_engine_stopping
    async def failing(stopping: object) -> None:
        raise RuntimeError("a broken hook")

    await app.begin_startup()
    await app.shutdown()
    assert calls == ["started ready=True", "stopping stopped=False"]
    assert server.stopped
