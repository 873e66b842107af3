"""Run the ASGI app under daphne, starting and stopping the engine with the reactor (daphne sends no lifespan)."""

from __future__ import annotations

import asyncio
import sys


def run_daphne(host: str, port: int, *, access_log: bool = True) -> None:
    """Serve `console.asgi:application` with daphne in the foreground until interrupted."""
    # daphne.server installs Twisted's asyncio reactor; it must be imported before anything touches Twisted
    from daphne.server import Server  # isort: skip

    from daphne.access import AccessLogGenerator
    from daphne.endpoints import build_endpoint_description_strings
    from twisted.internet import defer, reactor

    from console.asgi import application

    def start_engine() -> None:
        # called before the reactor runs; call_soon defers the start until the loop is running
        asyncio.get_event_loop().call_soon(application.begin_startup)

    def stop_engine() -> defer.Deferred:
        return defer.Deferred.fromFuture(asyncio.ensure_future(application.shutdown()))

    reactor.addSystemEventTrigger("before", "shutdown", stop_engine)
    Server(
        application=application,
        endpoints=build_endpoint_description_strings(host=host, port=port),
        action_logger=AccessLogGenerator(sys.stdout) if access_log else None,
        ready_callable=start_engine,
    ).run()
