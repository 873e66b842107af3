"""Size and credentials before the body: Django never spools a body its sender may not send."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from console.accounts.roles import Role
from console.accounts.tokens import issue_token
from console.hosting.body_gate import FORM_LIMIT_BYTES, BodyGate
from tests.console.accounts.conftest import make_user

pytestmark = pytest.mark.django_db(transaction=True)

UPLOAD = "/api/models/simple/versions/"


class Django:
    """Stands for Django's ASGI handler: reads the whole body, as Django does, and notes how much it got."""

    def __init__(self) -> None:
        self.read = 0
        self.called = 0

    async def __call__(self, scope, receive, send) -> None:
        self.called += 1
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            self.read += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


async def send_request(gate: BodyGate, path: str, headers: dict[str, str], chunks: list[bytes]) -> tuple[int, int]:
    """(status, body chunks the client got to send before the answer)."""
    pieces = list(chunks)
    sent: list[dict] = []
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
    }

    async def receive() -> dict:
        body = pieces.pop(0) if pieces else b""
        return {"type": "http.request", "body": body, "more_body": bool(pieces)}

    async def send(message: dict) -> None:
        sent.append(message)

    await gate(scope, receive, send)
    return sent[0]["status"], len(chunks) - len(pieces)


@pytest.fixture
def gate(settings):
    django = Django()
    return BodyGate(django, settings.INFERA.replace(max_upload_mb=1)), django


async def test_an_anonymous_300_mb_upload_is_refused_before_a_byte_is_read(gate):
    """The attack: anonymous 300 MB to /api/ filled the temporary folder before the 401."""
    app, django = gate
    status, sent = await send_request(app, UPLOAD, {"content-length": str(300 * 2**20)}, [b"x" * 1024] * 4)
    assert status == 413 and sent == 0 and django.called == 0  # over the upload limit: refused on its header
    status, sent = await send_request(app, UPLOAD, {"content-length": "1000"}, [b"x" * 1000])
    assert status == 401 and sent == 0 and django.called == 0


async def test_a_viewer_may_not_send_an_upload_but_an_operator_may(gate):
    app, django = gate
    _, viewer_key = await sync_to_async(issue_token)(await sync_to_async(make_user)("vi", Role.VIEWER), "ci")
    _, operator_key = await sync_to_async(issue_token)(await sync_to_async(make_user)("op", Role.OPERATOR), "ci")
    refused = await send_request(
        app, UPLOAD, {"content-length": "10", "authorization": f"Bearer {viewer_key}"}, [b"x" * 10]
    )
    assert refused == (403, 0)
    allowed = await send_request(
        app, UPLOAD, {"content-length": "10", "authorization": f"Token {operator_key}"}, [b"x" * 10]
    )
    assert allowed == (201, 1) and django.read == 10


async def test_a_body_that_streams_past_its_limit_without_a_length_is_cut_off(gate):
    app, django = gate
    _, key = await sync_to_async(issue_token)(await sync_to_async(make_user)("op2", Role.OPERATOR), "ci")
    chunk = b"x" * (1024 * 1024)
    status, sent = await send_request(app, "/api/models/", {"authorization": f"Bearer {key}"}, [chunk] * 8)
    assert status == 413 and sent <= FORM_LIMIT_BYTES // len(chunk) + 1 < 8


async def test_small_forms_pass_without_credentials(gate):
    app, django = gate
    assert await send_request(app, "/accounts/login/", {"content-length": "40"}, [b"u" * 40]) == (201, 1)
