"""Dashboard stand-ins: N WebSocket clients on /ws/metrics/ that read every snapshot, driven from stdin.

Run as `python -m bench.ws_clients URL COOKIE`; commands, one a line: `open N`, `close`, `quit`. Each answers one
line: `opened N`, `closed MESSAGES SECONDS`, or `error REASON`.
"""

from __future__ import annotations

import asyncio
import sys
import time
from urllib.parse import urlparse

from websockets.asyncio.client import ClientConnection, connect


class Dashboards:
    """A set of open WebSocket clients that drain their messages and count them."""

    def __init__(self, url: str, cookie: str) -> None:
        self.url = url
        parsed = urlparse(url)
        scheme = "https" if parsed.scheme == "wss" else "http"
        self.headers = {"Cookie": f"sessionid={cookie}", "Origin": f"{scheme}://{parsed.netloc}"}
        self.connections: list[ClientConnection] = []
        self.readers: list[asyncio.Task] = []
        self.messages = 0
        self.opened_at = 0.0

    async def open(self, count: int) -> None:
        self.connections = [await connect(self.url, additional_headers=self.headers) for _ in range(count)]
        self.readers = [asyncio.create_task(self._drain(c)) for c in self.connections]
        self.messages = 0
        self.opened_at = time.monotonic()

    async def _drain(self, connection: ClientConnection) -> None:
        async for _ in connection:
            self.messages += 1

    async def close(self) -> tuple[int, float]:
        seconds = time.monotonic() - self.opened_at
        for connection in self.connections:
            await connection.close()
        await asyncio.gather(*self.readers, return_exceptions=True)
        self.connections, self.readers = [], []
        return self.messages, seconds


async def main(url: str, cookie: str) -> None:
    dashboards = Dashboards(url, cookie)
    loop = asyncio.get_running_loop()
    while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
        command, *args = line.split()
        try:
            if command == "open":
                await dashboards.open(int(args[0]))
                print(f"opened {len(dashboards.connections)}", flush=True)
            elif command == "close":
                messages, seconds = await dashboards.close()
                print(f"closed {messages} {seconds:.3f}", flush=True)
            elif command == "quit":
                break
        except Exception as error:  # the harness reads the reason and reports the run as not available
            print(f"error {type(error).__name__}: {error}".replace("\n", " "), flush=True)
    await dashboards.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
