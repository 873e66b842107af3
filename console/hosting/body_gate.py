"""Size and credentials before the body: an ASGI gate in front of Django, which reads whole bodies before any view.

Django spools a request body to disk before authentication and before a view could refuse it, so an anonymous
300 MB POST would fill the temporary folder to be answered 401. The gate answers first: a declared body over the
route's limit gets 413, a large body (or any upload) from someone who may not send it gets 401 or 403, all without
reading a byte; and a body that streams past its limit without declaring a length is cut off with 413.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from asgiref.sync import sync_to_async

from console.accounts.principals import principal_for
from console.config import InferaSettings

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# the one place that takes model files: POST /api/models/<name>/versions/
UPLOAD_PATH = re.compile(r"^/api/models/[^/]+/versions/?$")
# room for the multipart framing, the notes and a config beside the file itself
MULTIPART_SLACK_BYTES = 2 * 1024 * 1024
# forms, JSON bodies of the API: far above what any of them needs
FORM_LIMIT_BYTES = 4 * 1024 * 1024
# bodies above this need credentials before they are read (sign-in forms are far below)
ANONYMOUS_BODY_BYTES = 64 * 1024


class BodyGate:
    """Wraps the Django ASGI app; every other scope type passes through untouched."""

    def __init__(self, app: ASGIApp, settings: InferaSettings) -> None:
        self.app = app
        self.upload_limit = settings.max_upload_bytes + MULTIPART_SLACK_BYTES
        self.max_upload_mb = settings.max_upload_mb

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        upload = bool(UPLOAD_PATH.match(scope["path"]))
        limit = self.upload_limit if upload else FORM_LIMIT_BYTES
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _answer(send, 413, self._too_large(upload, limit))
            return
        if upload or declared is None or declared > ANONYMOUS_BODY_BYTES:
            refusal = await sync_to_async(sender_refusal, thread_sensitive=False)(scope, upload)
            if refusal is not None:
                await _answer(send, *refusal)
                return
        counted = _CountedBody(receive, limit)
        started = False

        async def tracked_send(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, counted, tracked_send)
        if counted.over and not started:
            await _answer(send, 413, self._too_large(upload, limit))

    def _too_large(self, upload: bool, limit: int) -> str:
        if upload:
            return f"the upload is over the limit of {self.max_upload_mb} MB (INFERA_MAX_UPLOAD_MB)"
        return f"the request body is over the limit of {limit // (1024 * 1024)} MB"


class _CountedBody:
    """The body as Django reads it, cut off (as a disconnect) once it passes `limit` bytes."""

    def __init__(self, receive: Callable, limit: int) -> None:
        self.receive = receive
        self.limit = limit
        self.size = 0
        self.over = False

    async def __call__(self) -> dict:
        if self.over:
            return {"type": "http.disconnect"}
        message = await self.receive()
        if message["type"] == "http.request":
            self.size += len(message.get("body", b""))
            if self.size > self.limit:
                self.over = True
                return {"type": "http.disconnect"}
        return message


def _content_length(scope: dict) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def sender_refusal(scope: dict, upload: bool, *, tokens_only: bool = False) -> tuple[int, str] | None:
    """(status, message) when the sender may not send this body, None when they may (database lookups).

    `tokens_only`: only an API token counts (the /v2 paths, which take no session).
    """
    principal = _principal(scope, tokens_only)
    if principal is None:
        return 401, "sign in or send an API token ('Authorization: Bearer <key>') before sending a body this large"
    if upload and not principal.may_change_models:
        return 403, "uploading model versions needs the operator or admin role"
    return None


def _principal(scope: dict, tokens_only: bool = False) -> Any:
    from django.conf import settings
    from django.contrib.auth import SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from console.accounts.tokens import TokenRefused, find_token, key_from_authorization

    headers = {name.lower(): value for name, value in scope.get("headers", ())}
    authorization = headers.get(b"authorization")
    if authorization is not None:
        try:
            key = key_from_authorization(authorization.decode("latin-1"))
            if key is not None:
                token = find_token(key)
                return principal_for(token.user, token)
        except TokenRefused:
            return None
    if tokens_only:
        return None
    session_key = _cookie(headers.get(b"cookie", b""), settings.SESSION_COOKIE_NAME)
    if session_key:
        user_id = SessionStore(session_key).get(SESSION_KEY)
        user = get_user_model().objects.filter(pk=user_id, is_active=True).first() if user_id else None
        if user is not None:
            return principal_for(user)
    return None


def _cookie(header: bytes, name: str) -> str | None:
    for part in header.decode("latin-1").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


async def _answer(send: Callable, status: int, message: str) -> None:
    body = orjson.dumps({"detail": message})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="infera"'))
    headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
