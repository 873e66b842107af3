"""Access logs without secrets: query-string values of credential-like keys are masked in both servers' logs.

A link such as `/accounts/reset/?token=...` or a client that puts `?password=` in a URL must not leave the secret in
uvicorn's or daphne's access log. API keys anywhere in the line are masked too (console.accounts.log_masking).

Access lines cost the event loop one append: the server's access logger is replaced by a stand-in that queues the
line's fields (client, method, path, HTTP version, status, bytes and duration where the server knows them) for the
log writer's thread (log_writer.py), which masks, formats and writes them in batches: the same text as the
server's own lines (uvicorn's `INFO:     client - "GET /path HTTP/1.1" 200 OK`, daphne's NCSA-like one), or JSON
lines (INFERA_ACCESS_LOG_FORMAT=json). INFERA_ACCESS_LOG_SAMPLE=N writes one line in N, followed by ` [N requests]`
(a JSON line's "count"); the last line written at shutdown stands for the requests left over, so the counts add up.
"""

from __future__ import annotations

import datetime
import http
import json
import logging
import re
import sys
from time import time as _now
from typing import IO, TYPE_CHECKING, Any

from console.accounts.log_masking import mask_secrets
from console.hosting.log_writer import LogWriter, write_lines

if TYPE_CHECKING:
    from console.config import InferaSettings

MASK = "***"
# query keys whose values are credentials
_SECRET_QUERY = re.compile(
    r"([?&](?:token|key|api_key|apikey|access_token|auth|password|passwd|secret|session|sessionid)=)[^&\s#\"]*",
    re.IGNORECASE,
)


# what every pattern of mask_query needs in the text to match anything: most paths hold none of them
_SECRET_SIGNS = ("?", "&", "ifr_", "authorization", "token", "bearer", "password")


def mask_query(text: str) -> str:
    """`text` with the values of credential-like query parameters (and any API key) replaced by ***."""
    return mask_secrets(_SECRET_QUERY.sub(rf"\1{MASK}", text))


def mask_access_field(text: str) -> str:
    """mask_query(text), quicker for a path or method that shows no sign of a secret (the regular expressions
    cost several µs a line, held on the writer's thread with the interpreter lock the event loop needs too)."""
    lowered = text.lower()
    for sign in _SECRET_SIGNS:
        if sign in lowered:
            return mask_query(text)
    return text


class QueryMaskingFilter(logging.Filter):
    """For uvicorn.access records: (client, method, path with query, http version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and len(record.args) >= 3 and isinstance(record.args[2], str):
            args = list(record.args)
            args[2] = mask_query(args[2])
            record.args = tuple(args)
        return True


def mask_uvicorn_access_log() -> None:
    """Mask the access log of uvicorn (call after uvicorn has configured its loggers)."""
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, QueryMaskingFilter) for f in logger.filters):
        logger.addFilter(QueryMaskingFilter())


class MaskedAccessLog:
    """A text stream for daphne's AccessLogGenerator that masks each line before writing it."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(mask_query(text))

    def flush(self) -> None:
        self.stream.flush()


# --- access lines written off the event loop (log_writer.py) ---------------------------------------------

_PHRASES = {status.value: status.phrase for status in http.HTTPStatus}


class AccessRoute:
    """The access lines of one server, as it writes them (`text`) or as JSON lines, one in `sample` written with
    the count of the requests it stands for. Lives on the writer thread, apart from `put`'s callers."""

    def __init__(self, stream: IO[str], *, style: str, fmt: str = "text", sample: int = 1) -> None:
        self.stream = stream
        self.text = daphne_text_line if style == "daphne" else uvicorn_text_line
        self.json = fmt == "json"
        self.sample = sample
        self.pending = 0  # requests since the last line written (sampled)
        self.last: tuple[Any, ...] | None = None

    def render(self, item: tuple[Any, ...], lines: list[str]) -> None:
        if self.sample > 1:
            self.pending += 1
            if self.pending < self.sample:
                self.last = item
                return
            self.pending, self.last = 0, None
        self._line(item, lines, self.sample)

    def finish(self, lines: list[str]) -> None:
        if self.last is not None and self.pending:
            self._line(self.last, lines, self.pending)
        self.pending, self.last = 0, None

    def _line(self, item: tuple[Any, ...], lines: list[str], count: int) -> None:
        _, when, client, method, path, version, status, size, seconds = item
        method, path = mask_access_field(method), mask_access_field(path)
        if self.json:
            entry: dict[str, Any] = {
                "time": datetime.datetime.fromtimestamp(when, datetime.UTC).isoformat(timespec="milliseconds"),
                "client": client,
                "method": method,
                "path": path,
                "status": status,
            }
            if version is not None:
                entry["http_version"] = version
            if size is not None:
                entry["bytes"] = size
            if seconds is not None:
                entry["duration_ms"] = round(seconds * 1000, 3)
            if self.sample > 1:
                entry["count"] = count
            lines.append(json.dumps(entry, ensure_ascii=False) + "\n")
            return
        line = self.text(when, client, method, path, version, status, size)
        lines.append(f"{line} [{count} requests]\n" if self.sample > 1 else line + "\n")

    def write(self, lines: list[str]) -> None:
        write_lines(self.stream, lines)


def uvicorn_text_line(when: float, client: str, method: str, path: str, version: str, status: int, size: Any) -> str:
    # uvicorn's AccessFormatter without colours, byte for byte (tests compare them)
    return f'INFO:     {client} - "{method} {path} HTTP/{version}" {status} {_PHRASES.get(status, "")}'


def daphne_text_line(when: float, client: str, method: str, path: str, version: Any, status: int, size: Any) -> str:
    # daphne's AccessLogGenerator (NCSA-like), local time as it writes it
    date = datetime.datetime.fromtimestamp(when).strftime("%d/%b/%Y:%H:%M:%S")
    return f'{client} - - [{date}] "{method} {path}" {status or "-"} {size or "-"}'


class UvicornAccessLines:
    """Stands in for the `uvicorn.access` logger on a protocol and its cycles: `info` queues the line's fields."""

    __slots__ = ("writer", "items", "limit", "route")

    def __init__(self, writer: LogWriter, route: AccessRoute) -> None:
        self.writer, self.items, self.limit = writer, writer.items, writer.limit
        self.route = route

    def info(self, msg: str, client: str, method: str, path: str, version: str, status: int) -> None:
        items = self.items  # LogWriter.put, inlined: this runs once a request on the loop
        if len(items) < self.limit:
            items.append((self.route, _now(), client, method, path, version, status, None, None))
        else:
            self.writer.dropped += 1


class DaphneAccessLines:
    """daphne's action logger: queues an HTTP request's fields, or a WebSocket action's (as daphne names them)."""

    __slots__ = ("put", "route")
    WEBSOCKET = {"connecting": "WSCONNECTING", "rejected": "WSREJECT", "connected": "WSCONNECT"}
    WEBSOCKET["disconnected"] = "WSDISCONNECT"

    def __init__(self, writer: LogWriter, route: AccessRoute) -> None:
        self.put = writer.put
        self.route = route

    def __call__(self, protocol: str, action: str, details: dict[str, Any]) -> None:
        if protocol == "http" and action == "complete":
            self.put(
                (
                    self.route,
                    _now(),
                    details["client"],
                    details["method"],
                    details["path"],
                    None,
                    details["status"],
                    details["size"],
                    details.get("time_taken"),
                )
            )
        elif protocol == "websocket" and action in self.WEBSOCKET:
            action = self.WEBSOCKET[action]
            self.put((self.route, _now(), details["client"], action, details["path"], None, None, None, None))


def start_log_writer(infera: InferaSettings, *, server: str, access_log: bool) -> tuple[LogWriter, Any]:
    """Start the process's log writer, route every logger's handlers through it, and return it with the stand-in
    for the server's access logger (UvicornAccessLines, DaphneAccessLines; None without an access log)."""
    writer = LogWriter(infera.log_queue)
    lines: Any = None
    stream = sys.stdout
    if server == "uvicorn":  # uvicorn's access logger says where (stdout) and whether (INFERA_LOG_LEVEL=INFO)
        uvicorn_access = logging.getLogger("uvicorn.access")
        access_log = access_log and uvicorn_access.isEnabledFor(logging.INFO)
        stream = getattr(next(iter(uvicorn_access.handlers), None), "stream", stream)
    if access_log:
        route = AccessRoute(stream, style=server, fmt=infera.access_log_format, sample=infera.access_log_sample)
        writer.add_route(route)
        lines = (DaphneAccessLines if server == "daphne" else UvicornAccessLines)(writer, route)
    writer.route_handlers()
    return writer.start(), lines
