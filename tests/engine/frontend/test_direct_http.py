"""engine/frontend/direct_http.py under uvicorn, on loopback, over a real engine and V2App: /v2 inference and probes
are answered past uvicorn's ASGI cycle with the bytes the ASGI path answers, in one write; whatever the direct path
does not take (HTTP/1.0, a query, 100-continue, a chunked or large body, another path, a request pipelined behind
one still answered, a draining server) goes the ASGI way, answered in order."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from engine.frontend import Reply, Route, V2App
from engine.frontend.direct_http import DIRECT_BODY_BYTES, DirectRequestsProtocol, direct_length, response_bytes
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings
from tests.engine.model_factory import make_simple_onnx

BODY = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
        ]
    }
).encode()
SUMS = [v + 1 for v in range(16)]


def infer_request(path: str = "/v2/models/simple/infer", body: bytes = BODY, extra: bytes = b"") -> bytes:
    return (
        b"POST " + path.encode() + b" HTTP/1.1\r\nHost: infera\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n" % len(body) + extra + b"\r\n" + body
    )


class Responder:
    """The application's part (the console's composition, the standalone app): the V2App's direct routes and
    answers, counted; and the ASGI app, counted, for what uvicorn's cycle takes."""

    def __init__(self, v2: V2App) -> None:
        self.v2 = v2
        self.direct: list[str] = []
        self.asgi: list[str] = []
        self.hold: asyncio.Event | None = None  # when set up, direct answers wait for it
        self.arrived = asyncio.Event()  # set by the first direct request
        self.draining = False

    def direct_route(self, path: str, method: str) -> Route | None:
        return self.v2.direct_route(path, method)

    async def respond_direct(self, scope: dict[str, Any], body: bytes, route: Route) -> Reply:
        self.direct.append(scope["path"])
        self.arrived.set()
        if self.hold is not None:
            await self.hold.wait()
        return await self.v2.respond(scope, body=body, route=route)

    async def app(self, scope: dict, receive, send) -> None:
        if scope["type"] == "http":
            self.asgi.append(scope["path"])
        await self.v2(scope, receive, send)


class Harness:
    def __init__(self, responder: Responder, port: int, writes: list[list[bytes]]) -> None:
        self.responder = responder
        self.port = port
        self.writes = writes  # each connection's writes, in order

    async def exchange(self, data: bytes, answers: int = 1, close: bool = True) -> list[tuple[bytes, bytes]]:
        """Send `data` on a new connection; the (head, body) of `answers` responses."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(data)
        responses = [await read_response(reader) for _ in range(answers)]
        if close:
            writer.close()
        return responses

    async def one_by_one(self, requests: list[bytes]) -> list[tuple[bytes, bytes]]:
        """Send each request on one kept-alive connection once the one before it is answered."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        responses = []
        for data in requests:
            writer.write(data)
            responses.append(await read_response(reader))
        writer.close()
        return responses


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    if head.startswith(b"HTTP/1.1 100"):
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    length = int(re.search(rb"content-length: (\d+)", head).group(1))
    return head, await asyncio.wait_for(reader.readexactly(length), timeout=30)


async def held_request(served: Harness) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A direct inference on a new connection that has reached the responder, its answer held until the test
    sets `served.responder.hold`."""
    served.responder.hold = asyncio.Event()
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(infer_request())
    await asyncio.wait_for(served.responder.arrived.wait(), timeout=30)
    return reader, writer


def outputs(body: bytes) -> dict[str, list]:
    return {o["name"]: o["data"] for o in json.loads(body)["outputs"]}


def without_date(head: bytes) -> bytes:
    return re.sub(rb"date: [^\r]*\r\n", b"", head)


@pytest.fixture
async def served(tmp_path: Path):
    make_simple_onnx(tmp_path, name="simple")
    engine = InferenceServer(tmp_path, gpu_count=0, settings=EngineSettings())
    await engine.start()
    responder = Responder(V2App(engine))
    writes: list[list[bytes]] = []

    class Recorded(DirectRequestsProtocol):
        def draining(self) -> bool:
            return responder.draining

        def connection_made(self, transport: Any) -> None:
            writes.append([])
            real_write = transport.write

            def write(data: bytes) -> None:
                writes[-1].append(bytes(data))
                real_write(data)

            transport.write = write
            super().connection_made(transport)

    Recorded.responder = responder
    listener = socket.create_server(("127.0.0.1", 0))
    config = uvicorn.Config(
        responder.app, http=Recorded, lifespan="off", log_level="warning", loop="asyncio", interface="asgi3"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[listener]))
    while not server.started:
        await asyncio.sleep(0)  # a yield to the loop: uvicorn starts on this same loop
    try:
        yield Harness(responder, listener.getsockname()[1], writes)
    finally:
        if responder.hold is not None:
            responder.hold.set()
        server.should_exit = True
        await task
        await engine.stop()


async def test_it_answers_an_inference_past_asgi_in_one_write_with_the_asgi_paths_bytes(served: Harness) -> None:
    ((direct_head, direct_body),) = await served.exchange(infer_request())
    ((asgi_head, asgi_body),) = await served.exchange(infer_request("/v2/models/simple/infer?via=asgi"))
    assert served.responder.direct == ["/v2/models/simple/infer"]
    assert served.responder.asgi == ["/v2/models/simple/infer"]
    assert outputs(direct_body)["OUTPUT0"] == SUMS and direct_body == asgi_body
    assert without_date(direct_head) == without_date(asgi_head)
    assert direct_head.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-type: application/json\r\n" in direct_head
    assert len(served.writes[0]) == 1 and served.writes[0][0] == direct_head + direct_body


async def test_it_answers_probes_and_refusals_directly(served: Harness) -> None:
    probe = b"GET /v2/health/ready HTTP/1.1\r\nHost: infera\r\n\r\n"
    wrong = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 15], "datatype": "INT32", "data": [0] * 15}]})
    (ready, refused, unknown) = await served.one_by_one(
        [probe, infer_request(body=wrong.encode()), infer_request("/v2/models/nothing/infer")]
    )
    assert ready[0].startswith(b"HTTP/1.1 200 OK")
    assert refused[0].startswith(b"HTTP/1.1 400 ") and b"INPUT" in refused[1]
    assert unknown[0].startswith(b"HTTP/1.1 400 ") and b"unknown model: 'nothing'" in unknown[1]  # as Triton
    assert served.responder.asgi == []


async def test_it_answers_pipelined_requests_in_order_whichever_path_takes_them(served: Harness) -> None:
    metadata = b"GET /v2/models/simple/config HTTP/1.1\r\nHost: infera\r\n\r\n"  # not a direct endpoint
    answers = await served.exchange(infer_request() + metadata + infer_request() + metadata, answers=4)
    assert [b'"outputs"' in body for _, body in answers] == [True, False, True, False]
    assert all(b'"max_batch_size"' in body for _, body in answers[1::2])
    # the first is direct; the rest arrived while it was answered, and uvicorn's cycle queued them
    assert served.responder.direct == ["/v2/models/simple/infer"]
    assert served.responder.asgi == ["/v2/models/simple/config", "/v2/models/simple/infer", "/v2/models/simple/config"]


async def test_it_leaves_to_asgi_what_it_does_not_take(served: Harness) -> None:
    chunked = (
        b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: infera\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n" % len(BODY)
        + BODY
        + b"\r\n0\r\n\r\n"
    )
    old = infer_request().replace(b"HTTP/1.1", b"HTTP/1.0", 1)
    expecting = infer_request(extra=b"Expect: 100-continue\r\n")
    escaped = infer_request("/v2/models/%73imple/infer")
    for data in (chunked, old, expecting, escaped):
        ((head, body),) = await served.exchange(data)
        assert head.startswith(b"HTTP/1.1 200 OK") and outputs(body)["OUTPUT0"] == SUMS
    assert served.responder.direct == []
    assert len(served.responder.asgi) == 4


async def test_it_leaves_a_body_over_its_limit_to_asgi(served: Harness) -> None:
    spaced = BODY[:-1] + b" " * (DIRECT_BODY_BYTES + 1 - len(BODY)) + BODY[-1:]  # valid JSON, over the limit
    ((head, body),) = await served.exchange(infer_request(body=spaced))
    assert head.startswith(b"HTTP/1.1 200 OK") and outputs(body)["OUTPUT0"] == SUMS
    assert served.responder.direct == [] and served.responder.asgi == ["/v2/models/simple/infer"]


async def test_it_closes_the_connection_after_a_request_that_asks_it_to(served: Harness) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(infer_request(extra=b"Connection: close\r\n"))
    head, body = await read_response(reader)
    assert b"connection: close\r\n" in head and outputs(body)["OUTPUT0"] == SUMS
    assert await asyncio.wait_for(reader.read(), timeout=30) == b""  # closed by the server
    writer.close()
    assert served.responder.direct == ["/v2/models/simple/infer"]


async def test_it_closes_after_its_answer_and_leaves_new_requests_to_asgi_while_draining(served: Harness) -> None:
    reader, writer = await held_request(served)
    served.responder.draining = True  # the server begins to drain while the answer is being made
    served.responder.hold.set()
    head, body = await read_response(reader)
    assert b"connection: close\r\n" in head and outputs(body)["OUTPUT0"] == SUMS
    assert await asyncio.wait_for(reader.read(), timeout=30) == b""
    writer.close()
    ((head, _),) = await served.exchange(infer_request())
    assert head.startswith(b"HTTP/1.1 200 OK") and served.responder.asgi == ["/v2/models/simple/infer"]


async def test_it_keeps_serving_after_a_client_leaves_before_its_answer(served: Harness) -> None:
    reader, writer = await held_request(served)
    writer.close()
    await writer.wait_closed()
    served.responder.hold.set()
    ((head, body),) = await served.exchange(infer_request())
    assert head.startswith(b"HTTP/1.1 200 OK") and outputs(body)["OUTPUT0"] == SUMS
    assert served.writes[0] == []  # nothing was written to the client that left


def test_it_declares_a_length_only_for_a_plain_body_within_its_limit() -> None:
    assert direct_length([]) == 0
    assert direct_length([(b"content-length", b"12")]) == 12
    assert direct_length([(b"content-length", b"%d" % DIRECT_BODY_BYTES)]) == DIRECT_BODY_BYTES
    assert direct_length([(b"content-length", b"%d" % (DIRECT_BODY_BYTES + 1))]) is None
    assert direct_length([(b"content-length", b"-1")]) is None
    assert direct_length([(b"transfer-encoding", b"chunked")]) is None


def test_it_writes_a_reply_as_uvicorns_cycle_would() -> None:
    reply = Reply(503, b"{}", headers=[(b"retry-after", b"1")])
    defaults = [(b"server", b"uvicorn"), (b"date", b"Thu, 03 Dec 2026 07:00:00 GMT")]
    assert response_bytes(reply, defaults, keep_alive=False) == (
        b"HTTP/1.1 503 Service Unavailable\r\nserver: uvicorn\r\ndate: Thu, 03 Dec 2026 07:00:00 GMT\r\n"
        b"content-type: application/json\r\ncontent-length: 2\r\nretry-after: 1\r\nconnection: close\r\n\r\n{}"
    )


async def test_it_logs_a_direct_answer_as_uvicorns_access_log_does(served: Harness, caplog) -> None:
    caplog.set_level("INFO", logger="uvicorn.access")
    await served.exchange(infer_request())
    (record,) = [r for r in caplog.records if r.name == "uvicorn.access"]
    client, method, path, version, status = record.args
    assert (method, path, version, status) == ("POST", "/v2/models/simple/infer", "1.1", 200)
    assert client.startswith("127.0.0.1:")


async def test_the_standalone_app_answers_v2_directly_once_its_engine_has_begun(tmp_path: Path) -> None:
    from engine.frontend.standalone import create_standalone_app

    make_simple_onnx(tmp_path, name="simple")
    app = create_standalone_app(tmp_path, gpu_count=0)
    assert app.direct_route("/v2/models/simple/infer", "POST") is None  # not begun: the ASGI way starts it
    await app.start()
    try:
        route = app.direct_route("/v2/models/simple/infer", "POST")
        assert route is not None and app.direct_route("/metrics", "GET") is None
        scope = {"type": "http", "method": "POST", "path": "/v2/models/simple/infer", "headers": []}
        reply = await app.respond_direct(scope, BODY, route)
        assert reply.status == 200 and outputs(reply.body)["OUTPUT0"] == SUMS
    finally:
        await app.lifespan.shutdown()


def test_the_v2_app_routes_directly_only_inferences_and_probes(tmp_path: Path) -> None:
    v2 = V2App(InferenceServer(tmp_path, gpu_count=0))
    assert v2.direct_route("/v2/models/simple/infer", "POST") == Route("infer", "POST", model="simple")
    assert v2.direct_route("/v2/health/ready", "GET") is not None
    for path, method in [
        ("/v2/models/simple/infer", "GET"),  # a 405 is the ASGI path's to write
        ("/v2/models/simple/config", "GET"),
        ("/v2/models/simple/generate_stream", "POST"),  # a stream
        ("/v2/repository/index", "POST"),
        ("/metrics", "GET"),
        ("/accounts/login/", "POST"),
    ]:
        assert v2.direct_route(path, method) is None, path
