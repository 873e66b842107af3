"""Size and credentials before the body under daphne, which reads a whole body before it calls the application.

Twisted learns a request's length from its headers (`gotLength`) and then buffers the body, spooling large ones to
disk; the ASGI application sees nothing until the last byte. So a 10 GiB Content-Length would be waited for forever
and an anonymous 300 MB POST would fill the temporary folder. Here the request answers 413 at once when the declared
length is over the route's limit, and for a large body pauses reading while a worker thread checks the sender's
session or token (the same check as console/body_gate.py), answering 401/403 without reading the body.
"""

from __future__ import annotations

from typing import Any

import orjson

from console import body_gate
from console.composition import is_engine_path
from console.config import InferaSettings

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
            if is_engine_path(path):
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

            def check() -> tuple[int, str] | None:
                close_old_connections()
                try:
                    return body_gate.sender_refusal(scope, upload, tokens_only=tokens_only)
                finally:
                    close_old_connections()

            def decided(refusal: tuple[int, str] | None) -> None:
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
