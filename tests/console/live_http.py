"""Talking to a real `manage.py serve` the way clients do: raw HTTP on sockets, JSON inference, a signed-in session."""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
import urllib.parse

import numpy as np

from tests.conftest import ServerProcess
from tests.engine.frontend.asgi_client import Answer

GATED_BODY = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [7.0]}]})


def address(server: ServerProcess) -> tuple[str, int]:
    host, port = server.base_url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def connect(server: ServerProcess, timeout: float = 60.0) -> http.client.HTTPConnection:
    """A keep-alive connection to the server (opened now)."""
    connection = http.client.HTTPConnection(*address(server), timeout=timeout)
    connection.connect()
    return connection


def ask(connection: http.client.HTTPConnection, method: str, path: str, body: str | None = None) -> Answer:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())


def infer_gated(server: ServerProcess, model: str = "gated", timeout: float = 120.0) -> Answer:
    """POST one JSON inference of INPUT0 = [[7.0]] to the gated model on a connection of its own."""
    connection = connect(server, timeout)
    try:
        return ask(connection, "POST", f"/v2/models/{model}/infer", GATED_BODY)
    finally:
        connection.close()


def grpc_infer(server: ServerProcess, model: str = "gated", timeout: float = 120.0) -> np.ndarray:
    """One gRPC inference of INPUT0 = [[7.0]]; its OUTPUT0 (InferenceServerException when refused)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_address)
    tensor = grpcclient.InferInput("INPUT0", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[7.0]], dtype=np.float32))
    try:
        return client.infer(model, [tensor], client_timeout=timeout).as_numpy("OUTPUT0")
    finally:
        client.close()


def pending(server: ServerProcess, model: str) -> int:
    """Requests waiting in the model's queue, from /metrics (-1 when the model is not there)."""
    _, body = server.get("/metrics")
    found = re.search(rb'nv_inference_pending_request_count\{model="%s",version="1"\} (\d+)' % model.encode(), body)
    return int(found.group(1)) if found else -1


def wait_for_pending(server: ServerProcess, model: str, count: int, timeout: float = 60.0) -> None:
    """Poll /metrics until `count` requests wait in the model's queue; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while pending(server, model) != count:
        assert time.monotonic() < deadline, f"the queue of '{model}' never held {count} requests"
        time.sleep(0.05)  # polling, bounded by the deadline


def read_answer(sock: socket.socket) -> Answer | None:
    """The response the server sends on `sock` before closing it; None when it closes without one."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    if not data:
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Answer(int(lines[0].split(" ", 2)[1]), headers, body)


def session_cookie(server: ServerProcess) -> str:
    """Sign in as the server's admin through the sign-in form; the `Cookie` header of the signed-in session.

    The server must run with INFERA_SECURE_COOKIES=false (its cookies then travel over plain HTTP).
    """
    connection = connect(server)
    try:
        page = ask(connection, "GET", "/accounts/login/")
        cookies = _cookies(page)
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.body).group(1).decode()
        form = urllib.parse.urlencode(
            {"username": server.admin_username, "password": server.admin_password, "csrfmiddlewaretoken": token}
        )
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items()),
            "Origin": server.base_url,
            "Referer": server.base_url + "/accounts/login/",
        }
        connection.request("POST", "/accounts/login/", body=form, headers=headers)
        response = connection.getresponse()
        answer = Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
        cookies |= _cookies(answer, response.msg.get_all("Set-Cookie") or [])
        assert answer.status == 302 and "sessionid" in cookies, answer
        return "; ".join(f"{k}={v}" for k, v in cookies.items())
    finally:
        connection.close()


def _cookies(answer: Answer, set_cookies: list[str] | None = None) -> dict[str, str]:
    found = {}
    for header in set_cookies if set_cookies is not None else [answer.headers.get("set-cookie", "")]:
        name, _, rest = header.partition("=")
        if name:
            found[name.strip()] = rest.split(";", 1)[0]
    return found


def metric(server: ServerProcess, name: str) -> dict[tuple, float]:
    """Every sample of a /metrics family, by its labels."""
    _, body = server.get("/metrics")
    found = {}
    for line in body.decode().splitlines():
        matched = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if matched:
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', matched.group(1) or "")))
            found[labels] = float(matched.group(2))
    return found
