"""One socket write per response: the head that uvicorn writes alone is held until its body follows.

uvicorn's HTTP cycle writes a response's status line and headers on `http.response.start` and its body on
`http.response.body`: two writes, and on an idle socket two `send` system calls, the dearest single step of a small
response (bench/cpu_split.py's py-spy tables: 15.6 of the bare echo's 22.1 µs a request are those writes). An app that
sends both messages in one step (Infera's do) gets them joined into one write. A head the body does not follow in
the same step (a stream's first event still being made) goes out at the loop's next turn on its own, and so does
everything else the cycle writes (`100 Continue`), in the order written.
"""

from __future__ import annotations

import asyncio
from typing import Any

RESPONSE_HEAD = b"HTTP/1.1 "
INTERIM = b"HTTP/1.1 1"  # 1xx answers (100 Continue) go out at once: the client waits for them to send its body


class CoalescedWrites:
    """Stands in for a connection's transport in uvicorn's request cycles; everything but `write` is delegated,
    after what is held has been written."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.loop = loop
        self.held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self.held
        if held is not None:
            self.held = None
            self.transport.write(held + data)
        elif data.startswith(RESPONSE_HEAD) and not data.startswith(INTERIM):
            self.held = data
            self.loop.call_soon(self.flush)
        else:
            self.transport.write(data)

    def flush(self) -> None:
        """Write what is held, if anything (the loop's next turn, or before any other use of the transport)."""
        held = self.held
        if held is not None:
            self.held = None
            if not self.transport.is_closing():  # the client left meanwhile: as uvicorn's cycle, write nothing
                self.transport.write(held)

    def __getattr__(self, name: str) -> Any:
        self.flush()
        return getattr(self.transport, name)
