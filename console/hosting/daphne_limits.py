"""Size, credentials and time limits under daphne, which reads a whole body before it calls the application.

Twisted learns a request's length from its headers (`gotLength`) and then buffers the body, spooling large ones to
disk; the ASGI application sees nothing until the last byte. So a 10 GiB Content-Length would be waited for forever
and an anonymous 300 MB POST would fill the temporary folder. Here the request answers 413 at once when the declared
length is over the route's limit, and for a large body pauses reading while a worker thread checks the sender's
session or token (the same check as body_gate.py), answering 401/403 without reading the body.

Twisted's only clock is an idle timeout that any byte resets, so headers or a body sent a byte at a time never end.
`time_requests` gives every connection the read deadlines of read_deadlines.py, and while the process
drains (shutdown.py) answers each new request with `Connection: close`.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from console.config import InferaSettings
from console.hosting import body_gate
from console.hosting.composition import is_engine_path
from console.hosting.read_deadlines import ReadClock, timeout_answer
from console.hosting.shutdown import GOING_AWAY, Connections
from engine.api import HttpSettings, is_openai_path

logger = logging.getLogger("console.http")
STATUS_TEXT = {401: b"Unauthorized", 403: b"Forbidden", 413: b"Payload Too Large"}


def limit_request_bodies(server: Any, settings: InferaSettings, *, v2_needs_token: bool) -> None:
    """Make daphne's HTTP requests refuse oversized and unauthenticated bodies before reading them.

    `v2_needs_token`: whether /v2 asks for a token on this listen address (INFERA_INFERENCE_AUTH).
    """
    import daphne.http_protocol as protocol

    if getattr(protocol.WebRequest, "infera_limited", False):
        return

    class LimitedWebRequest(protocol.WebRequest):
        infera_limited = True
        _refused = False

        def gotLength(self, length: int | None) -> None:  # noqa: N802 - Twisted's name
            path = getattr(self.channel, "_path", b"").split(b"?", 1)[0].decode("latin-1", "replace")
            method = getattr(self.channel, "_command", b"").decode("latin-1", "replace")
            super().gotLength(length)
            if not length or method not in body_gate.BODY_METHODS:
                return
            upload = bool(body_gate.UPLOAD_PATH.match(path))
            if is_openai_path(path):  # OpenAI bodies are parsed on the loop: their own, smaller bound
                limit = min(settings.engine.openai.max_body_bytes, settings.engine.max_body_bytes)
            elif is_engine_path(path):
                limit = settings.engine.max_body_bytes
            else:
                limit = (
                    settings.max_upload_bytes + body_gate.MULTIPART_SLACK_BYTES
                    if upload
                    else body_gate.FORM_LIMIT_BYTES
                )
            if length > limit:
                self._refuse(413, f"the request body of {length} bytes is over the limit of {limit} bytes")
                return
            if length <= body_gate.ANONYMOUS_BODY_BYTES and not upload:
                return
            if is_engine_path(path):
                if v2_needs_token or self.requestHeaders.hasHeader(b"authorization"):
                    self._check_sender(path, upload=False, tokens_only=True)
                return
            self._check_sender(path, upload)

        def _check_sender(self, path: str, upload: bool, tokens_only: bool = False) -> None:
            from django.db import close_old_connections
            from twisted.internet import threads

            scope = {
                "path": path,
                "headers": [(k.lower(), v) for k, vs in self.requestHeaders.getAllRawHeaders() for v in vs],
            }
            transport = self.channel.transport
            transport.pauseProducing()
            self.channel.held = True  # the body's clock does not run while the server holds the client back

            def check() -> tuple[int, str] | None:
                close_old_connections()
                try:
                    return body_gate.sender_refusal(scope, upload, tokens_only=tokens_only)
                finally:
                    close_old_connections()

            def decided(refusal: tuple[int, str] | None) -> None:
                self.channel.held = False
                if refusal is not None:
                    self._refuse(*refusal)
                else:
                    transport.resumeProducing()

            threads.deferToThread(check).addCallbacks(decided, lambda failure: self._refuse(401, "unauthenticated"))

        def handleContentChunk(self, data: bytes) -> None:  # noqa: N802 - Twisted's name
            if not self._refused:
                super().handleContentChunk(data)

        def _refuse(self, status: int, message: str) -> None:
            self._refused = True
            body = orjson.dumps({"detail": message})
            head = (
                b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n"
                % (status, STATUS_TEXT.get(status, b"Error"), len(body))
            )
            if status == 401:
                head += b'WWW-Authenticate: Bearer realm="infera"\r\n'
            self.channel.transport.write(head + b"\r\n" + body)
            self.channel.transport.loseConnection()

    protocol.WebRequest = LimitedWebRequest


def time_requests(settings: HttpSettings, connections: Connections) -> None:
    """Make daphne's HTTP connections keep the read deadlines, the keep-alive limit and the drain's
    `Connection: close`."""
    import daphne.server as daphne_server
    from twisted.internet import reactor
    from twisted.web import http

    if getattr(daphne_server.HTTPFactory, "infera_timed", False):
        return

    class TimedHTTPChannel(http.HTTPChannel):
        held = False  # set while the server pauses reading to check the sender (LimitedWebRequest)

        def connectionMade(self) -> None:  # noqa: N802 - Twisted's names, here and below
            super().connectionMade()
            self._clock = ReadClock(
                settings,
                now=reactor.seconds,
                call_later=reactor.callLater,
                overdue=self._overdue,
                held=lambda: self.held,
            )
            self._clock.expect_headers()  # a first request's clock runs from the connection
            self._clock.watch()

        def connectionLost(self, reason: Any) -> None:  # noqa: N802
            self._clock.stop()
            super().connectionLost(reason)

        def dataReceived(self, data: bytes) -> None:  # noqa: N802
            if self._clock.expecting is None and not self._handlingRequest:
                self._clock.expect_headers()  # the first bytes of another request
            super().dataReceived(data)
            if self.transport.connected:
                self._clock.watch()

        def timeoutConnection(self) -> None:  # noqa: N802
            if self._clock.expecting is not None:  # a request is being read: its deadlines decide, not idle time
                self.resetTimeout()
                return
            super().timeoutConnection()

        def allHeadersReceived(self) -> None:  # noqa: N802
            super().allHeadersReceived()
            if connections.draining:
                self.persistent = False
                self.requests[-1].responseHeaders.setRawHeaders(b"connection", [b"close"])
            self._clock.expect_body()

        def rawDataReceived(self, data: bytes) -> None:  # noqa: N802
            self._clock.got_body(len(data))
            super().rawDataReceived(data)

        def allContentReceived(self) -> None:  # noqa: N802
            self._clock.stop()
            super().allContentReceived()

        def _overdue(self, what: str, reason: str) -> None:
            if not self.transport.connected:
                return
            if what == "headers" and self._handlingRequest:
                self.persistent = False  # a pipelined request trickles in behind one being answered
                return
            answered = what == "body" and bool(self.requests) and getattr(self.requests[-1], "_refused", False)
            peer = self.transport.getPeer()
            logger.info(
                "closing the connection of %s:%s: %s", getattr(peer, "host", "?"), getattr(peer, "port", 0), reason
            )
            if not answered:
                self.transport.write(timeout_answer(reason))
            self.transport.loseConnection()

    class TimedHTTPFactory(daphne_server.HTTPFactory):
        infera_timed = True

        def __init__(self, server: Any) -> None:
            super().__init__(server)
            self.timeOut = settings.keepalive_seconds  # Twisted's idle timeout: between requests, here

        def protocol(self) -> Any:  # what Twisted's own factory builds, around the timed channel
            return http._GenericHTTPChannelProtocol(TimedHTTPChannel())

    daphne_server.HTTPFactory = TimedHTTPFactory
    _let_websockets_go_away()


def _let_websockets_go_away() -> None:
    """Let an application close a WebSocket with 1001 "going away", which autobahn's sendClose refuses to send
    (it allows only 1000 and 3000-4999, though RFC 6455 defines 1001 for a server going down)."""
    import daphne.ws_protocol as ws_protocol

    class GoingAwayWebSocketProtocol(ws_protocol.WebSocketProtocol):
        def serverClose(self, code: int | None = None) -> None:  # noqa: N802 - daphne's name
            if code == GOING_AWAY:
                self.sendCloseFrame(code=code, isReply=False)
            else:
                super().serverClose(code)

    ws_protocol.WebSocketFactory.protocol = GoingAwayWebSocketProtocol
