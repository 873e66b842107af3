"""The bench's lean SSE client: a chunked answer's events counted however the bytes arrive, error events noticed,
a plain error answer read to its end; and a real keep-alive connection to a small server."""

from __future__ import annotations

import asyncio

from bench.sse_client import ResponseReader, SSEConnection

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


EVENTS = [b'data: {"text_output": "a"}\n\n', b'data: {"text_output": "b"}\n\n', b'data: {"error": "boom"}\n\n']
ANSWER = HEAD + b"".join(chunk(event) for event in EVENTS) + b"0\r\n\r\n"


def test_it_counts_events_however_the_bytes_are_split():
    for size in (1, 7, len(ANSWER)):
        reader = ResponseReader()
        pieces = [ANSWER[i : i + size] for i in range(0, len(ANSWER), size)]
        finished = [reader.feed(piece) for piece in pieces]
        assert finished[-1] and not any(finished[:-1])
        assert (reader.count.status, reader.count.events, reader.count.errors) == (200, 3, 1)
        assert reader.count.first_event_at is not None


def test_it_reads_an_error_answer_with_a_length():
    body = b'{"error": "unknown model"}'
    reader = ResponseReader()
    assert reader.feed(b"HTTP/1.1 400 Bad Request\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    assert (reader.count.status, reader.count.events) == (400, 0)


async def test_one_connection_posts_one_request_after_another():
    requests: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await reader.readuntil(b"\r\n\r\n"):
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            requests.append(await reader.readexactly(length))
            writer.write(ANSWER)
            await writer.drain()
            if len(requests) == 2:
                break
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    connection = await SSEConnection.open("127.0.0.1", port)
    counts = [await connection.post(f"127.0.0.1:{port}", "/x", body) for body in (b"{}", b'{"n": 2}')]
    connection.close()
    server.close()
    assert requests == [b"{}", b'{"n": 2}'] and [c.events for c in counts] == [3, 3]
