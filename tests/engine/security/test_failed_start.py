"""A server whose start-up failed says so (issue 32, low): /v2/health/ready answers 503, not the 400 of a server
still loading, and gRPC's ServerReady is false (both read `is_ready`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.frontend import V2App
from engine.serving.repository import ModelRepository
from engine.serving.server import InferenceServer


async def ready_status(app: V2App) -> int:
    scope = {"type": "http", "method": "GET", "path": "/v2/health/ready", "headers": [], "client": ("10.0.0.1", 1)}

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    return (await app.respond(scope, receive)).status


async def test_ready_answers_503_after_a_start_up_that_failed(tmp_path: Path, monkeypatch):
    def unreadable(self):
        raise PermissionError(13, "Permission denied", str(tmp_path))

    monkeypatch.setattr(ModelRepository, "model_names", unreadable)
    server = InferenceServer(tmp_path, gpu_count=0)
    app = V2App(server)
    assert await ready_status(app) == 400  # not started yet: still loading, as Triton answers
    with pytest.raises(PermissionError):
        await server.start()
    assert await ready_status(app) == 503
    assert not server.is_ready()
    assert server.startup_failure.startswith("PermissionError")
    monkeypatch.undo()
    await server.start()  # a start that succeeds clears it
    assert await ready_status(app) == 200
    await server.stop()
