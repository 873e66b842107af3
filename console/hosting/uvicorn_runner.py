"""Run the console under uvicorn, with Infera's read deadlines and graceful shutdown (shutdown.py).

uvicorn's own shutdown closes idle connections at once, gives in-flight requests `timeout_graceful_shutdown`, turns
a second SIGTERM into nothing (only a second Ctrl-C forces it), and re-raises the signal when it is done, so the
process ends killed by SIGTERM rather than exiting 0. Here the server drains first, exits 0, and a second signal of
either kind exits at once.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Generator
from socket import socket
from typing import Any

import uvicorn

from console.config import InferaSettings
from console.hosting.log_writer import ABORT_WRITE_SECONDS, LogWriter
from console.hosting.runtime import Runtime
from console.hosting.shutdown import ShutdownSignals
from console.hosting.uvicorn_limits import timed_protocol
from console.hosting.workers import reuse_port_socket
from console.peers.identity import ProcessIdentity

logger = logging.getLogger("console.shutdown")


class DrainingServer(uvicorn.Server):
    """uvicorn's server whose shutdown drains the runtime's requests before uvicorn's own steps."""

    def __init__(self, config: uvicorn.Config, runtime: Runtime, log_writer: LogWriter | None = None) -> None:
        super().__init__(config)
        self.runtime = runtime
        self.log_writer = log_writer
        self.signals = ShutdownSignals(drain=self._signalled, abort=self._abort)

    def _abort(self) -> None:
        self.runtime.abort()
        if self.log_writer is not None:  # the lines queued so far, within a second: the process exits at once
            self.log_writer.close(timeout=ABORT_WRITE_SECONDS)

    def _signalled(self) -> None:
        self.should_exit = True  # the main loop notices within a tick and calls shutdown()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        self.signals.install()
        try:
            yield
        finally:
            self.signals.restore()  # and no re-raising: a drained server exits 0

    async def shutdown(self, sockets: list[socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # no new connections; those open stay, their requests answered with Connection: close
        await self.runtime.drain()
        connections = self.runtime.connections
        if await connections.wait_for_requests(self.runtime.grace_left()):
            logger.info("no request in flight: closing the connections")
        else:
            logger.warning("%d requests still running at the end of the shutdown grace", connections.requests)
        # uvicorn's own steps: close every connection, cancel what still runs, then the lifespan's shutdown
        self.config.timeout_graceful_shutdown = self.runtime.grace_left()  # type: ignore[assignment]
        await super().shutdown(sockets)


def run_uvicorn(
    infera: InferaSettings,
    host: str,
    port: int,
    *,
    access_log: bool = True,
    identity: ProcessIdentity | None = None,
) -> None:
    """Serve the console application with uvicorn in the foreground until a signal ends it; a worker of
    `serve --workers` (`identity`) shares the port with the others (workers.py)."""
    from console.hosting.access_log import mask_uvicorn_access_log, start_log_writer
    from console.hosting.composition import build_application

    # the runtime knows where it listens
    application = build_application(infera, listen_host=host, identity=identity)
    http = infera.engine.http
    protocol = timed_protocol(http, application.runtime.connections, direct=application)
    config = uvicorn.Config(
        application,
        host=host,
        port=port,
        loop="uvloop",
        http=protocol,
        lifespan="on",
        # forwarding headers are read by the application, from INFERA_TRUSTED_PROXIES only (console/forwarded.py)
        proxy_headers=False,
        access_log=access_log,
        log_level=infera.log_level.lower(),
        timeout_keep_alive=http.keepalive_seconds,
        timeout_graceful_shutdown=infera.engine.shutdown_grace_seconds,
    )
    mask_uvicorn_access_log()  # uvicorn has configured its loggers by now
    writer, access_lines = start_log_writer(infera, server="uvicorn", access_log=access_log)
    if access_lines is not None:
        config.http = with_access_lines(protocol, access_lines)
    sockets = [reuse_port_socket(host, port)] if identity is not None and identity.has_workers else None
    try:
        DrainingServer(config, application.runtime, writer).run(sockets=sockets)
    finally:
        writer.close()  # every line queued until the end of the drain is written
        sys.stdout.flush()


def with_access_lines(protocol: type[Any], lines: object) -> type[Any]:
    """`protocol` whose access logger (its direct answers' and uvicorn's cycles') is `lines`, which queues each
    line for the log writer's thread (access_log.py) where uvicorn's logger formats and writes on the loop."""

    class AccessLinesProtocol(protocol):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.access_logger = lines

    return AccessLinesProtocol
