"""What a graceful shutdown waits for and ends, in process: requests counted, WebSockets closed with 1001, and
the second signal that does not wait. The real servers are tests/console/test_graceful_shutdown.py."""

from __future__ import annotations

import asyncio
import signal

import pytest

from console.hosting import shutdown
from console.hosting.shutdown import Connections, ShutdownSignals


class Socket:
    """The server's side of one WebSocket: what the application sent, and a client that never speaks."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.silent = asyncio.Event()
        self.accepted = asyncio.Event()

    async def receive(self) -> dict:
        await self.silent.wait()
        return {"type": "websocket.disconnect", "code": 1000}

    async def send(self, message: dict) -> None:
        self.sent.append(message)
        if message["type"] == "websocket.accept":
            self.accepted.set()


async def dashboard(scope: dict, receive, send) -> None:
    """A consumer: accepts, then streams until it reads a disconnect; records the code it read."""
    await send({"type": "websocket.accept"})
    message = await receive()
    scope["ended_with"] = message
    await send({"type": "websocket.send", "text": "late"})  # after the close: dropped, never raised


async def test_it_closes_open_websockets_with_1001_and_tells_the_application():
    connections = Connections()
    socket, scope = Socket(), {}
    running = asyncio.ensure_future(connections.websocket(dashboard, scope, socket.receive, socket.send))
    await socket.accepted.wait()
    await connections.drain()
    await running
    assert socket.sent == [
        {"type": "websocket.accept"},
        {"type": "websocket.close", "code": 1001, "reason": "server shutting down"},
    ]
    assert scope["ended_with"] == {"type": "websocket.disconnect", "code": 1001}


async def test_it_turns_away_a_websocket_that_arrives_while_draining():
    connections = Connections()
    await connections.drain()
    socket = Socket()
    await connections.websocket(dashboard, {}, socket.receive, socket.send)
    assert socket.sent == [{"type": "websocket.close", "code": 1001, "reason": "server shutting down"}]


async def test_it_waits_for_requests_in_flight_within_a_limit():
    connections = Connections()
    assert await connections.wait_for_requests(0)
    connections.request_started()
    assert not await connections.wait_for_requests(0)
    waiting = asyncio.ensure_future(connections.wait_for_requests(3600))
    connections.request_ended()
    assert await waiting


def test_the_first_signal_drains_and_the_second_exits_at_once(monkeypatch):
    calls: list[str] = []

    def exit_now(code: int) -> None:
        calls.append(f"exit {code}")
        raise SystemExit(code)

    monkeypatch.setattr(shutdown.os, "_exit", exit_now)
    signals = ShutdownSignals(drain=lambda: calls.append("drain"), abort=lambda: calls.append("abort"))
    signals.handle(signal.SIGTERM, None)
    assert calls == ["drain"]
    with pytest.raises(SystemExit):
        signals.handle(signal.SIGINT, None)
    assert calls == ["drain", "abort", f"exit {128 + signal.SIGINT}"]


def test_it_exits_even_when_stopping_the_models_fails(monkeypatch):
    exits: list[int] = []
    monkeypatch.setattr(shutdown.os, "_exit", exits.append)

    def broken() -> None:
        raise RuntimeError("a stub would not die")

    signals = ShutdownSignals(drain=lambda: None, abort=broken)
    signals.handle(signal.SIGTERM, None)
    with pytest.raises(RuntimeError):
        signals.handle(signal.SIGTERM, None)
    assert exits == [128 + signal.SIGTERM]
