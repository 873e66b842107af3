"""Load from wrk: a Lua script that POSTs one v2 body, and the parse of what its done() prints."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

WRK = shutil.which("wrk") or "/usr/bin/wrk"
RESULT_MARK = "BENCH_RESULT "

# done() prints one JSON line; summary.errors.status counts responses with a status of 400 and above, so no
# response() callback is needed (one would make wrk copy every body into Lua and lower the ceiling it measures).
LUA_TEMPLATE = """\
local f = assert(io.open({body_path}, "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
{header_lines}
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "{mark}{{\\"requests\\":%d,\\"duration_us\\":%d,\\"bytes\\":%d,\\"p50_us\\":%.1f,\\"p90_us\\":%.1f," ..
    "\\"p99_us\\":%.1f,\\"mean_us\\":%.1f,\\"max_us\\":%.1f,\\"connect\\":%d,\\"read\\":%d,\\"write\\":%d," ..
    "\\"status\\":%d,\\"timeout\\":%d}}\\n",
    summary.requests, summary.duration, summary.bytes, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.mean, latency.max, e.connect, e.read, e.write, e.status, e.timeout))
end
"""


@dataclass
class WrkRun:
    """One wrk run: throughput, latency percentiles (µs) and errors of every kind."""

    requests: int
    duration_us: int
    p50_us: float
    p90_us: float
    p99_us: float
    mean_us: float
    max_us: float
    errors: int
    status_errors: int
    socket_errors: int

    @property
    def rps(self) -> float:
        return self.requests / (self.duration_us / 1e6) if self.duration_us else 0.0


def lua_string(text: str) -> str:
    """`text` as a Lua string literal."""
    return json.dumps(text)  # JSON string escapes are valid Lua escapes for the text we write


def write_script(folder: Path, name: str, body: bytes, headers: dict[str, str]) -> Path:
    """Write the body and the Lua script that sends it; return the script's path."""
    body_path = folder / f"{name}.body"
    body_path.write_bytes(body)
    header_lines = "\n".join(f"wrk.headers[{lua_string(k)}] = {lua_string(v)}" for k, v in headers.items())
    script = folder / f"{name}.lua"
    script.write_text(
        LUA_TEMPLATE.format(body_path=lua_string(str(body_path)), header_lines=header_lines, mark=RESULT_MARK)
    )
    return script


def parse_output(stdout: str) -> WrkRun:
    """The WrkRun in wrk's output (the line done() printed); ValueError when there is none."""
    for line in stdout.splitlines():
        if line.startswith(RESULT_MARK):
            data = json.loads(line[len(RESULT_MARK) :])
            socket_errors = data["connect"] + data["read"] + data["write"] + data["timeout"]
            return WrkRun(
                requests=data["requests"],
                duration_us=data["duration_us"],
                p50_us=data["p50_us"],
                p90_us=data["p90_us"],
                p99_us=data["p99_us"],
                mean_us=data["mean_us"],
                max_us=data["max_us"],
                errors=data["status"] + socket_errors,
                status_errors=data["status"],
                socket_errors=socket_errors,
            )
    raise ValueError(f"wrk printed no result line:\n{stdout[-2000:]}")


def run_wrk(url: str, script: Path, connections: int, seconds: float, threads: int = 1) -> WrkRun:
    """One wrk run against `url`; one thread leaves the other core to the server on a 2-core machine."""
    command = [
        WRK,
        f"-t{min(threads, connections)}",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        url,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    run = parse_output(done.stdout)
    if run.requests == 0:
        # nothing came back in the whole run: each connection's request hung, which wrk counts nowhere
        run.socket_errors = max(run.socket_errors, connections)
        run.errors = run.status_errors + run.socket_errors
    return run


def median_run(runs: list[WrkRun]) -> dict:
    """Each figure the median of the runs; errors summed over them (a failure in any run counts)."""
    return {
        "rps": statistics.median(r.rps for r in runs),
        "p50_ms": statistics.median(r.p50_us for r in runs) / 1000,
        "p99_ms": statistics.median(r.p99_us for r in runs) / 1000,
        "errors": sum(r.errors for r in runs),
        "requests": sum(r.requests for r in runs),
        "runs": [asdict(r) | {"rps": r.rps} for r in runs],
    }


class WrkScripts:
    """A temporary folder of Lua scripts and bodies, one per (model, encoding)."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="infera-bench-wrk-")
        self.folder = Path(self._tmp.name)

    def script(self, name: str, body: bytes, headers: dict[str, str]) -> Path:
        path = self.folder / f"{name}.lua"
        return path if path.exists() else write_script(self.folder, name, body, headers)

    def close(self) -> None:
        self._tmp.cleanup()
