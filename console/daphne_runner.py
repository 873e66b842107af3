"""Run the console under daphne, starting and stopping the runtime with the reactor (daphne sends no lifespan)."""

from __future__ import annotations

import asyncio
import sys

from console.config import InferaSettings


def run_daphne(infera: InferaSettings, host: str, port: int, *, access_log: bool = True) -> None:
    """Serve the console application with daphne in the foreground until interrupted."""
    # daphne.server installs Twisted's asyncio reactor; it must be imported before anything touches Twisted
    from daphne.server import Server  # isort: skip

    from daphne.access import AccessLogGenerator
    from daphne.endpoints import build_endpoint_description_strings
    from twisted.internet import defer, reactor

    from console.access_log import MaskedAccessLog
    from console.accounts.inference_auth import resolve_mode
    from console.composition import build_application
    from console.daphne_limits import limit_request_bodies

    application = build_application(infera, listen_host=host)
    lifespan = application.runtime.lifespan

    def start_runtime() -> None:
        # called before the reactor runs; call_soon defers the start until the loop is running
        asyncio.get_event_loop().call_soon(lifespan.begin)

    def stop_runtime() -> defer.Deferred:
        return defer.Deferred.fromFuture(asyncio.ensure_future(lifespan.shutdown()))

    reactor.addSystemEventTrigger("before", "shutdown", stop_runtime)
    server = Server(
        application=application,
        endpoints=build_endpoint_description_strings(host=host, port=port),
        action_logger=AccessLogGenerator(MaskedAccessLog(sys.stdout)) if access_log else None,
        ready_callable=start_runtime,
    )
    needs_token = resolve_mode(infera.inference_auth, host) == "token"
    limit_request_bodies(server, infera, v2_needs_token=needs_token)
    server.run()
