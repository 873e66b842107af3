"""Run the console under daphne: the runtime starts and stops with the reactor (daphne sends no lifespan), requests
keep daphne_limits.py's limits, and a signal drains the process as shutdown.py says.

Daphne's own SIGTERM handling stops the reactor at once and cancels every request in flight; here the first signal
stops listening, drains, and only then stops the reactor.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

from console.config import InferaSettings
from console.hosting.log_writer import ABORT_WRITE_SECONDS
from console.hosting.shutdown import ShutdownSignals
from console.hosting.workers import reuse_port_socket
from console.peers.identity import ProcessIdentity

logger = logging.getLogger("console.shutdown")


def run_daphne(
    infera: InferaSettings,
    host: str,
    port: int,
    *,
    access_log: bool = True,
    identity: ProcessIdentity | None = None,
) -> None:
    """Serve the console application with daphne in the foreground until a signal ends it.

    Daphne has no workers of its own: under `serve --workers N` each worker is one daphne process (one reactor,
    one engine) listening on a SO_REUSEPORT socket of the shared port, handed to Twisted as a file descriptor.
    """
    # daphne.server installs Twisted's asyncio reactor; it must be imported before anything touches Twisted
    from daphne.server import Server  # isort: skip

    from twisted.internet import defer, reactor

    from console.accounts.inference_auth import resolve_mode
    from console.hosting.access_log import start_log_writer
    from console.hosting.composition import build_application
    from console.hosting.daphne_limits import limit_request_bodies, time_requests

    application = build_application(infera, listen_host=host, identity=identity)
    runtime = application.runtime
    lifespan = runtime.lifespan

    class DrainingServer(Server):
        """Daphne's server, keeping the ports it listens on so that a drain can stop listening."""

        def listen_success(self, listening: Any) -> None:
            ports.append(listening)
            super().listen_success(listening)

    ports: list[Any] = []

    def start_runtime() -> None:
        # called before the reactor runs; call_soon defers the start until the loop is running
        asyncio.get_event_loop().call_soon(lifespan.begin)

    def stop_runtime() -> defer.Deferred:
        return defer.Deferred.fromFuture(asyncio.ensure_future(lifespan.shutdown()))

    async def drain() -> None:
        for listening in ports:
            listening.stopListening()  # connections already open stay, answered with Connection: close
        await runtime.drain()
        if await runtime.connections.wait_for_requests(runtime.grace_left()):
            logger.info("no request in flight: closing the connections")
        else:
            logger.warning("%d requests still running at the end of the shutdown grace", runtime.connections.requests)
        reactor.stop()  # closes every connection, cancels what still runs, then stops the runtime

    reactor.addSystemEventTrigger("before", "shutdown", stop_runtime)
    writer, access_lines = start_log_writer(infera, server="daphne", access_log=access_log)
    server = DrainingServer(
        application=application,
        endpoints=_endpoints(host, port, shared=identity is not None and identity.has_workers),
        action_logger=access_lines,  # each line queued for the log writer's thread (access_log.py)
        ready_callable=start_runtime,
        signal_handlers=False,  # ours: drain on the first signal, exit on the second
    )
    needs_token = resolve_mode(infera.inference_auth, host) == "token"
    limit_request_bodies(server, infera, v2_needs_token=needs_token)
    time_requests(infera.engine.http, runtime.connections)

    def abort() -> None:
        runtime.abort()
        writer.close(timeout=ABORT_WRITE_SECONDS)  # the lines queued so far: the process exits at once

    signals = ShutdownSignals(drain=lambda: reactor.callFromThread(asyncio.ensure_future, drain()), abort=abort)
    signals.install()
    try:
        server.run()
    finally:
        signals.restore()
        writer.close()  # every line queued until the end of the drain is written
        sys.stdout.flush()


def _endpoints(host: str, port: int, *, shared: bool) -> list[str]:
    """Twisted endpoint strings: host and port, or a SO_REUSEPORT socket of a worker sharing the port."""
    from daphne.endpoints import build_endpoint_description_strings

    if not shared:
        return build_endpoint_description_strings(host=host, port=port)
    if ":" in host:  # Twisted's fd: endpoint adopts IPv4 sockets only (its domain argument stays a string)
        raise SystemExit("serve --server daphne --workers listens on IPv4 addresses only; use uvicorn for IPv6")
    sock = reuse_port_socket(host, port)
    return [f"fd:fileno={sock.detach()}"]  # Twisted adopts the descriptor (and closes it)
