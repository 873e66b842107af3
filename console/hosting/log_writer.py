"""One writer thread for the serving process's log: the event loop only appends to a queue, the thread formats.

A log line written on the loop costs it the record, the filters, the formatting and a write and flush per line; at
64 connections the access log alone halved the requests a second. Here the loop appends a small tuple (an access
line's fields) or the record (the application log) to a deque and returns; a thread wakes every INTERVAL seconds,
formats what has arrived (filters and masking included) and writes each stream's lines a few KB a write
(write_lines: whole lines, at most PIPE_BUF bytes, so processes sharing a pipe never split each other's lines).

The queue holds at most `limit` items (INFERA_LOG_QUEUE); past it, which happens only when the stream itself stops
taking lines (a stalled pipe, a full disk), items are dropped and counted, never waited for, and the writer says
"N log lines dropped" once it can write again. `close()` (the end of a drain, and at exit) writes what is queued.
"""

from __future__ import annotations

import atexit
import collections
import logging
import select
import sys
import threading
from typing import IO, Any, Protocol

INTERVAL = 0.02  # seconds between two batches: a line waits at most this long
ABORT_WRITE_SECONDS = 1.0  # how long a process exiting at once (a second signal) gives the queued lines
PIPE_BUF = getattr(select, "PIPE_BUF", 512)  # bytes a pipe takes in one piece (4096 on Linux, POSIX's least 512)


class Route(Protocol):
    """Where queued items of one kind go: `render` turns one into lines, `write` writes a batch of them."""

    def render(self, item: tuple[Any, ...], lines: list[str]) -> None: ...

    def write(self, lines: list[str]) -> None: ...

    def finish(self, lines: list[str]) -> None:
        """At close, the lines still held back (a sampled access log's last group)."""


class LogWriter:
    """The queue and its thread. `put` is the loop's side (thread-safe, never blocks)."""

    def __init__(self, limit: int, *, interval: float = INTERVAL, errors: IO[str] | None = None) -> None:
        self.limit = limit
        self.items: collections.deque[tuple[Any, ...]] = collections.deque()
        self.dropped = 0  # items refused because the queue was full (counted on the loop's side)
        self._reported = 0
        self._interval = interval
        self._errors = errors
        self._routes: list[Route] = []
        self._stop = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="infera-log-writer", daemon=True)
        self._restore: list[tuple[logging.Logger, list[logging.Handler]]] = []

    def start(self) -> LogWriter:
        self._thread.start()
        atexit.register(self.close)
        return self

    def add_route(self, route: Route) -> None:
        self._routes.append(route)

    def put(self, item: tuple[Any, ...]) -> None:
        """Queue `item` (its first field is its Route); counted as dropped when the queue is full."""
        items = self.items
        if len(items) < self.limit:
            items.append(item)
        else:
            self.dropped += 1

    def route_handlers(self) -> None:
        """Send every handler's records (the root's, Django's, the engine's, uvicorn's) through this writer."""
        forwarders: dict[int, ForwardingHandler] = {}
        known = list(logging.Logger.manager.loggerDict.values())
        loggers = [logging.getLogger()] + [v for v in known if isinstance(v, logging.Logger)]
        for logger in loggers:
            if not logger.handlers or any(isinstance(h, ForwardingHandler) for h in logger.handlers):
                continue
            self._restore.append((logger, list(logger.handlers)))
            replaced = []
            for handler in logger.handlers:
                forwarder = forwarders.get(id(handler))
                if forwarder is None:
                    forwarder = forwarders[id(handler)] = ForwardingHandler(self, handler)
                replaced.append(forwarder)
            logger.handlers = replaced

    def close(self, timeout: float | None = None) -> None:
        """Give the loggers their own handlers back, then write everything queued and stop the thread (waiting at
        most `timeout` seconds for it: a process about to exit at once, on a second signal)."""
        if self._closed:
            return
        self._closed = True
        for logger, handlers in self._restore:
            logger.handlers = handlers
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        else:
            self._drain(final=True)
        atexit.unregister(self.close)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            stopping = self._stop.wait(self._interval)
            self._drain(final=stopping)

    def _drain(self, *, final: bool) -> None:
        items = self.items
        batches: dict[int, tuple[Route, list[str]]] = {}
        popleft = items.popleft
        while items:
            item = popleft()
            route = item[0]
            batch = batches.get(id(route))
            if batch is None:
                batch = batches[id(route)] = (route, [])
            try:
                route.render(item, batch[1])
            except Exception:  # one bad item (a record whose arguments do not format) costs only its line
                name = getattr(item[1], "name", "access")  # the logger's name: its message may hold a secret
                self._complain(f"a log line of {name} could not be formatted\n")
        if final:
            for route in self._routes:
                batch = batches.get(id(route))
                if batch is None:
                    batch = batches[id(route)] = (route, [])
                route.finish(batch[1])
        for route, lines in batches.values():
            if lines:
                try:
                    route.write(lines)
                except (OSError, ValueError):  # a closed or broken stream: nothing to write to
                    pass
        dropped = self.dropped
        if dropped != self._reported:
            self._complain(
                f"{dropped - self._reported} log lines dropped: the log stream did not take them as fast as they "
                f"came (more than INFERA_LOG_QUEUE={self.limit} waiting)\n"
            )
            self._reported = dropped

    def _complain(self, text: str) -> None:
        stream = self._errors or sys.stderr
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):
            pass


def write_lines(stream: IO[str], lines: list[str]) -> None:
    """Write whole lines in as few writes as a pipe keeps whole: each at most PIPE_BUF bytes, so that the lines of
    processes sharing the stream (the workers of `serve --workers`, a pipe to a log collector) never interleave
    within a line, as they did not when each line was a write of its own."""
    chunk: list[str] = []
    size = 0
    for line in lines:
        if chunk and size + len(line) > PIPE_BUF:
            _write_chunk(stream, chunk)
            chunk, size = [], 0
        chunk.append(line)
        size += len(line)
    if chunk:
        _write_chunk(stream, chunk)


def _write_chunk(stream: IO[str], chunk: list[str]) -> None:
    text = "".join(chunk)
    if text.isascii() or len(chunk) == 1:  # characters are bytes: within PIPE_BUF
        stream.write(text)
        stream.flush()
        return
    for line in chunk:  # wider characters: a line a write, as before
        stream.write(line)
        stream.flush()


class HandlerRoute:
    """The records of one of the process's own handlers: its filters (secrets masked) and formatter applied on the
    writer thread; a stream handler's lines written together (write_lines)."""

    def __init__(self, handler: logging.Handler) -> None:
        self.handler = handler

    def render(self, item: tuple[Any, ...], lines: list[str]) -> None:
        handler, record = self.handler, item[1]
        if not handler.filter(record):
            return
        if isinstance(handler, logging.StreamHandler):
            lines.append(handler.format(record) + handler.terminator)
        else:
            handler.handle(record)

    def write(self, lines: list[str]) -> None:
        handler = self.handler  # a StreamHandler: only theirs render lines
        with handler.lock or _NO_LOCK:
            write_lines(handler.stream, lines)  # type: ignore[attr-defined]

    def finish(self, lines: list[str]) -> None:
        pass


class ForwardingHandler(logging.Handler):
    """Stands in for a handler on the loop's side: the record is queued, nothing else (no lock, no filter)."""

    def __init__(self, writer: LogWriter, target: logging.Handler) -> None:
        super().__init__(target.level)
        self.writer = writer
        self.route = HandlerRoute(target)

    def handle(self, record: logging.LogRecord) -> bool:  # type: ignore[override]
        self.writer.put((self.route, record))
        return True

    def emit(self, record: logging.LogRecord) -> None:
        self.handle(record)


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LOCK = _NoLock()
