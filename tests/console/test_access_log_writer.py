"""Access lines and the application log written off the event loop (console/hosting/log_writer.py,
console/hosting/access_log.py): the same lines as uvicorn's and daphne's own, JSON lines, sampled lines whose counts
add up, every line written by the end of a shutdown; and a real `manage.py serve` under load writes exactly one line per
request."""

from __future__ import annotations

import asyncio
import datetime
import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.hosting.access_log import AccessRoute, DaphneAccessLines, UvicornAccessLines
from console.hosting.log_writer import LogWriter
from tests.conftest import ServerProcess, serve_process, stop_process

REQUESTS = 2000
CONNECTIONS = 32
HOUR = 3600.0  # a writer that never wakes by itself: only close() writes


def writer_with(route: AccessRoute, limit: int = 1000, errors: io.StringIO | None = None) -> LogWriter:
    writer = LogWriter(limit, interval=HOUR, errors=errors)
    writer.add_route(route)
    return writer.start()


def test_it_writes_uvicorns_access_line_byte_for_byte() -> None:
    from uvicorn.logging import AccessFormatter

    formatter = AccessFormatter(
        '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s', use_colors=False
    )
    stream = io.StringIO()
    route = AccessRoute(stream, style="uvicorn")
    writer = writer_with(route)
    lines = UvicornAccessLines(writer, route)
    args = ("127.0.0.1:5000", "POST", "/v2/models/simple/infer", "1.1", 200)
    lines.info('%s - "%s %s HTTP/%s" %d', *args)
    lines.info('%s - "%s %s HTTP/%s" %d', "10.0.0.1:1", "GET", "/x", "1.1", 299)  # no phrase known
    writer.close()
    record = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d', args, None)
    first, second = stream.getvalue().splitlines()
    assert first == formatter.format(record)
    assert second == 'INFO:     10.0.0.1:1 - "GET /x HTTP/1.1" 299 '


def test_it_writes_daphnes_access_lines_as_daphne_does() -> None:
    from daphne.access import AccessLogGenerator

    stream, theirs = io.StringIO(), io.StringIO()
    route = AccessRoute(stream, style="daphne")
    writer = writer_with(route)
    lines = DaphneAccessLines(writer, route)
    http = {"client": "127.0.0.1:5", "method": "GET", "path": "/a", "status": 404, "size": 12, "time_taken": 0.01}
    lines("http", "complete", http)
    lines("websocket", "connected", {"client": "127.0.0.1:6", "path": "/ws/metrics/"})
    writer.close()
    AccessLogGenerator(theirs)("http", "complete", http)
    AccessLogGenerator(theirs)("websocket", "connected", {"client": "127.0.0.1:6", "path": "/ws/metrics/"})
    no_dates = re.compile(r"\[[^\]]*\]")
    assert no_dates.sub("[]", stream.getvalue()) == no_dates.sub("[]", theirs.getvalue())


def test_it_masks_secrets_in_text_and_json_lines() -> None:
    for fmt in ("text", "json"):
        stream = io.StringIO()
        route = AccessRoute(stream, style="uvicorn", fmt=fmt)
        writer = writer_with(route)
        UvicornAccessLines(writer, route).info(
            "", "127.0.0.1:5", "GET", "/reset/?token=s3cr3t&key=ifr_abcdefgh12", "1.1", 200
        )
        writer.close()
        assert "s3cr3t" not in stream.getvalue() and "abcdefgh12" not in stream.getvalue(), fmt
        assert "token=***" in stream.getvalue()


def test_its_quick_mask_masks_what_the_full_one_does() -> None:
    from console.hosting.access_log import mask_access_field, mask_query

    samples = [
        "/v2/models/simple/infer",
        "/a?x=1&token=s",
        "/a&password=x",
        "/k/ifr_abcdefghijk",
        "/h/Authorization: Bearer abcdefghijklmnopqrstuvwxyz",
        "/t/TOKEN abcdefghijklmnopqrstuvwxyz",
        "PASSWORD=x",
        "/IFR_abcdefghijk",
    ]
    for text in samples:
        assert mask_access_field(text) == mask_query(text), text


def test_its_json_lines_carry_what_the_server_knows() -> None:
    stream = io.StringIO()
    route = AccessRoute(stream, style="daphne", fmt="json")
    writer = writer_with(route)
    details = {"client": "127.0.0.1:5", "method": "POST", "path": "/v2/x", "status": 200, "size": 3, "time_taken": 0.5}
    DaphneAccessLines(writer, route)("http", "complete", details)
    writer.close()
    line = json.loads(stream.getvalue())
    assert {k: line[k] for k in ("client", "method", "path", "status", "bytes", "duration_ms")} == {
        "client": "127.0.0.1:5",
        "method": "POST",
        "path": "/v2/x",
        "status": 200,
        "bytes": 3,
        "duration_ms": 500.0,
    }
    assert datetime.datetime.fromisoformat(line["time"]).tzinfo is not None
    assert "count" not in line


def test_sampled_lines_stand_for_every_request_including_the_last_few() -> None:
    for fmt in ("text", "json"):
        stream = io.StringIO()
        route = AccessRoute(stream, style="uvicorn", fmt=fmt, sample=7)
        writer = writer_with(route)
        lines = UvicornAccessLines(writer, route)
        for n in range(100):
            lines.info("", "127.0.0.1:5", "GET", f"/n/{n}", "1.1", 200)
        writer.close()
        written = stream.getvalue().splitlines()
        if fmt == "json":
            counts = [json.loads(line)["count"] for line in written]
        else:
            counts = [int(re.search(r" \[(\d+) requests\]$", line).group(1)) for line in written]
        assert len(written) == 15 and sum(counts) == 100 and counts[-1] == 2, fmt


def test_a_full_queue_drops_and_says_how_many_lines() -> None:
    stream, errors = io.StringIO(), io.StringIO()
    route = AccessRoute(stream, style="uvicorn")
    writer = writer_with(route, limit=1000, errors=errors)
    lines = UvicornAccessLines(writer, route)
    for n in range(1003):
        lines.info("", "127.0.0.1:5", "GET", f"/n/{n}", "1.1", 200)
    writer.close()
    assert len(stream.getvalue().splitlines()) == 1000
    assert errors.getvalue().startswith("3 log lines dropped")


def test_the_application_log_is_filtered_and_formatted_on_the_writer_thread() -> None:
    import threading

    from console.accounts.log_masking import SecretMaskingFilter

    class Recording(logging.Filter):
        thread = 0

        def filter(self, record: logging.LogRecord) -> bool:
            Recording.thread = threading.get_ident()
            return True

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(Recording())
    handler.addFilter(SecretMaskingFilter())
    logger = logging.getLogger("tests.log_writer")
    logger.handlers, logger.propagate, logger.level = [handler], False, logging.INFO
    writer = LogWriter(1000, interval=HOUR).start()
    writer.route_handlers()
    try:
        assert logger.handlers[0] is not handler
        logger.info("signed in with key %s", "ifr_abcdefghijkl")
        logger.debug("below the level")
        assert stream.getvalue() == ""  # nothing written on the caller's thread
    finally:
        writer.close()
    assert stream.getvalue() == "INFO tests.log_writer: signed in with key ifr_***\n"
    assert Recording.thread not in (0, threading.get_ident())
    assert logger.handlers == [handler]  # given back at close


def test_it_writes_whole_lines_at_most_a_pipe_buffer_at_a_time() -> None:
    from console.hosting.log_writer import PIPE_BUF, write_lines

    class Writes(io.StringIO):
        writes: list[str]

        def write(self, text: str) -> int:
            self.writes.append(text)
            return len(text)

    stream = Writes()
    stream.writes = []
    lines = [f"line {n:05d} " + "x" * 90 + "\n" for n in range(1000)]
    write_lines(stream, lines)
    assert "".join(stream.writes) == "".join(lines)
    assert all(len(w) <= PIPE_BUF and w.endswith("\n") for w in stream.writes)
    assert len(stream.writes) < len(lines) // 30
    wide = ["é" * 1000 + "\n"] * 3  # 3,003 characters, 6,003 bytes in UTF-8: a line a write
    stream.writes = []
    write_lines(stream, wide)
    assert stream.writes == wide


def test_its_settings_are_read_strictly(tmp_path: Path) -> None:
    from console.config import read_settings
    from console.env import EnvError

    base = {"INFERA_VAR_DIR": str(tmp_path)}
    default = read_settings(base)
    assert (default.access_log_format, default.access_log_sample, default.log_queue) == ("text", 1, 200_000)
    chosen = read_settings(base | {"INFERA_ACCESS_LOG_FORMAT": "JSON", "INFERA_ACCESS_LOG_SAMPLE": "100"})
    assert (chosen.access_log_format, chosen.access_log_sample) == ("json", 100)
    with pytest.raises(EnvError, match="INFERA_ACCESS_LOG_FORMAT must be one of text, json, got 'xml'"):
        read_settings(base | {"INFERA_ACCESS_LOG_FORMAT": "xml"})
    with pytest.raises(EnvError, match="INFERA_ACCESS_LOG_SAMPLE must be at least 1, got 0"):
        read_settings(base | {"INFERA_ACCESS_LOG_SAMPLE": "0"})
    with pytest.raises(EnvError, match="INFERA_LOG_QUEUE must be at least 1000, got 10"):
        read_settings(base | {"INFERA_LOG_QUEUE": "10"})


def test_serve_refuses_a_sample_out_of_range() -> None:
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="--access-log-sample must be between 1 and 1000000, got 0"):
        call_command("serve", "--access-log-sample", "0")


# ---- a real server under load --------------------------------------------------------------------------------------


async def load(port: int, paths: list[str]) -> list[int]:
    """GET every path over CONNECTIONS keep-alive connections; the statuses."""
    queue = list(reversed(paths))
    statuses: list[int] = []

    async def client() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while queue:
                path = queue.pop()
                writer.write(f"GET {path} HTTP/1.1\r\nHost: infera\r\n\r\n".encode())
                head = await reader.readuntil(b"\r\n\r\n")
                statuses.append(int(head.split(b" ", 2)[1]))
                length = re.search(rb"(?i)content-length: *(\d+)", head)
                await reader.readexactly(int(length.group(1)) if length else 0)
        finally:
            writer.close()

    await asyncio.gather(*(client() for _ in range(CONNECTIONS)))
    return statuses


def loaded_paths(count: int) -> list[str]:
    """/v2 probes: most answered by the protocol itself, one in ten (a query) through uvicorn's ASGI cycle."""
    return [f"/v2/health/live?token=s3cr3t{n}" if n % 10 == 0 else "/v2/health/live" for n in range(count)]


@pytest.fixture(scope="module")
def served_under_load(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[str]:
    """The log of a server that answered the load and was stopped (SIGINT: a drain) right after it."""
    server_name, flags = request.param
    var_dir: Path = tmp_path_factory.mktemp("access-log") / "var"
    with serve_process(var_dir, "--no-seed", "--server", server_name, "--grpc-port", "0", *flags) as server:
        statuses = asyncio.run(load(int(server.base_url.rsplit(":", 1)[1]), loaded_paths(REQUESTS)))
        assert statuses == [200] * REQUESTS
        stop_process(server.process)  # the lines still queued are written by the end of the drain
        yield server_log(server)


def server_log(server: ServerProcess) -> str:
    assert server.process.returncode == 0, server.log()[-4000:]
    return server.log()


@pytest.mark.server
@pytest.mark.parametrize("served_under_load", [("uvicorn", [])], indirect=True)
def test_serve_writes_one_access_line_per_request_under_load(served_under_load: str) -> None:
    lines = [line for line in served_under_load.splitlines() if "GET /v2/health/live" in line]
    assert len(lines) == REQUESTS
    line_format = re.compile(r'INFO:     127\.0\.0\.1:\d+ - "GET /v2/health/live(\?token=\*\*\*)? HTTP/1\.1" 200 OK')
    assert all(line_format.fullmatch(line) for line in lines)
    assert sum("token=***" in line for line in lines) == REQUESTS // 10
    assert "s3cr3t" not in served_under_load


@pytest.mark.server
@pytest.mark.parametrize(
    "served_under_load",
    [("daphne", ["--access-log-format", "json", "--access-log-sample", "7"])],
    indirect=True,
)
def test_serve_writes_sampled_json_lines_whose_counts_add_up_under_load(served_under_load: str) -> None:
    entries = [json.loads(line) for line in served_under_load.splitlines() if line.startswith("{")]
    # every request the server answered: the load, and the sign-in page that told the test it was up
    assert sum(e["count"] for e in entries) == REQUESTS + 1
    assert len(entries) == (REQUESTS + 1 + 6) // 7  # the last line, written at shutdown, stands for the rest
    assert all(e["status"] == 200 and e["method"] == "GET" for e in entries)
    assert "s3cr3t" not in served_under_load
