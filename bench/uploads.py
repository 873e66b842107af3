"""Model version uploads through the management API (POST /api/models/{name}/versions/, multipart), standard
library only: the soak's periodic uploads and the hygiene test's failed ones."""

from __future__ import annotations

import http.client
import json
import uuid
from urllib.parse import urlsplit


def multipart_body(fields: dict[str, str], files: dict[str, tuple[str, bytes]]) -> tuple[bytes, str]:
    """A multipart/form-data body of `fields` and `files` (form name -> (file name, content)); (body, its type)."""
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    for name, (filename, content) in files.items():
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        )
        parts.append(head.encode() + content + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


class UploadClient:
    """One keep-alive connection to the console that uploads versions with an API token."""

    def __init__(self, base_url: str, token: str, timeout: float = 60.0) -> None:
        address = urlsplit(base_url)
        self.host, self.port = address.hostname or "127.0.0.1", address.port or 80
        self.token = token
        self.timeout = timeout
        self.connection: http.client.HTTPConnection | None = None

    def upload(self, model: str, filename: str, content: bytes, **fields: str) -> tuple[int, dict]:
        """Upload `content` as `filename`, a new version of `model`; (status, JSON answer)."""
        body, content_type = multipart_body(fields, {"file": (filename, content)})
        return self.request("POST", f"/api/models/{model}/versions/", body, {"Content-Type": content_type})

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        """One call on the kept connection (opened anew when the server closed it); (status, JSON answer)."""
        headers = {"Authorization": f"Token {self.token}", **(headers or {})}
        if self.connection is None:
            self.connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            self.connection.request(method, path, body=body, headers=headers)
            response = self.connection.getresponse()
            text = response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        if response.getheader("Connection", "").lower() == "close":
            self.close()
        return response.status, json.loads(text) if text.strip().startswith(b"{") else {}

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None
