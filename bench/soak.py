"""`python -m bench.soak --minutes N`: the whole console process under mixed traffic for N minutes; nothing may fail.

One `manage.py serve` with the seeded demo models (SQLite, uvicorn) gets, all at once and for the whole run:
- the traffic of bench/soak_traffic.py: every demo model, JSON and binary, at concurrencies from 1 to 16, every
  answer checked;
- a switch of `digits` between its versions 1 and 2 every `--switch-every` seconds, through the console's REST API;
- an upload of a new version of `simple` every `--upload-every` seconds (the same ONNX file, activated), the one
  uploaded before deleted once the new one serves, so the store and the engine stay the same size;
- `--dashboards` WebSocket clients on /ws/metrics/, in a process of their own (bench/ws_clients.py).
It samples the server's RSS, threads, open fds and child processes (the python model stubs) every
`--sample-every` seconds and closes a latency window every `--window` seconds, then writes soak.json and a Plotly
report (bench/results/soak/ by default) and the figures' table into docs/reliability.md. The exit status is 1 when
any request, switch or upload failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.checked_load import run_load
from bench.dashboards import DashboardProcess
from bench.footprint import footprint
from bench.hotswap import call_api, console_switcher, wait_until
from bench.infera import ConsoleHome
from bench.servers import PYTHON, ROOT, NotAvailable, ServerProcess, ServerSpec, free_port
from bench.soak_report import write_doc_table, write_html
from bench.soak_traffic import Mix, Window, demo_streams
from bench.system import load_average, usable_cores
from bench.uploads import UploadClient
from console.demo.pipeline import PIPELINE_MODELS
from console.demo.sequences import SEQUENCE_MODELS

RESULTS = ROOT / "bench" / "results" / "soak"
DOC = ROOT / "docs" / "reliability.md"
DEMO_MODELS = ["simple", "simple_string", "digits", "digits_pipeline", "text_generator"]
DEMO_MODELS += [name for name, *_ in SEQUENCE_MODELS] + [name for name, *_ in PIPELINE_MODELS]
SWITCHED = "digits"
PHASE_S = 300.0  # p99 is compared between the first and the last five minutes
UPLOADED = "simple"
SERVER_ENV = {
    # the soak's own polling of the API (a switch waits for the new version to serve) is not a client to slow down
    "INFERA_API_RATE": "1000000/min",
    "INFERA_DISABLE_NVML": "1",
}


@dataclass(frozen=True)
class SoakSettings:
    minutes: float
    out: Path
    doc: Path | None
    switch_every: float
    upload_every: float
    dashboards: int
    pause_ms: float
    sample_every: float
    window: float


def parse_args(argv: list[str] | None) -> SoakSettings:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the traffic runs (default 30)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"where soak.json and report.html go ({RESULTS})")
    parser.add_argument("--doc", default=str(DOC), help="the markdown file whose soak table is rewritten ('' for none)")
    parser.add_argument("--switch-every", type=float, default=30.0, help="seconds between version switches")
    parser.add_argument("--upload-every", type=float, default=60.0, help="seconds between uploads")
    parser.add_argument("--dashboards", type=int, default=5, help="WebSocket clients on /ws/metrics/")
    parser.add_argument("--pause-ms", type=float, default=5.0, help="pause of each connection between requests")
    parser.add_argument("--sample-every", type=float, default=5.0, help="seconds between footprint samples")
    parser.add_argument("--window", type=float, default=10.0, help="seconds of each latency window")
    args = parser.parse_args(argv)
    return SoakSettings(**vars(args) | {"doc": Path(args.doc) if args.doc else None})


class Phases:
    """Every latency of the first and of the last `length` seconds of the run (the windows whose middle falls in
    them), for their p50 and p99."""

    def __init__(self, started: float, length: float, duration: float) -> None:
        self.started = started
        self.bounds = {"first": (0.0, length), "last": (duration - length, duration)}
        self.latencies: dict[str, list[float]] = {"first": [], "last": []}
        self.spans: dict[str, list[float]] = {"first": [], "last": []}

    def close(self, window: Window, now: float) -> dict:
        """The figures of `window`, closed at `now`; its latencies kept for the phases it falls in."""
        begin, end = window.opened - self.started, now - self.started
        for name, (low, high) in self.bounds.items():
            if low <= (begin + end) / 2 < high:
                self.latencies[name] += [s for latencies in window.latencies.values() for s in latencies]
                self.spans[name] += [begin, end]
        return {"t": round(end, 1), **window.figures(now)}

    def figures(self) -> dict:
        out = {}
        for name, latencies in self.latencies.items():
            p50, p99 = (float(v) for v in np.percentile(latencies, [50, 99]) * 1000) if latencies else (None, None)
            spans = self.spans[name] or [0.0]
            out[name] = {
                "from_s": round(min(spans)),
                "to_s": round(max(spans)),
                "requests": len(latencies),
                "p50_ms": p50,
                "p99_ms": p99,
            }
        return out


class Periodic(threading.Thread):
    """Calls `action(number)` every `every` seconds until `stop`, recording each outcome. The first call comes after
    `every` seconds, or halfway through a run shorter than twice that, so a short run still has one."""

    def __init__(
        self, every: float, action: Callable[[int], dict], stop: threading.Event, started: float, duration: float
    ) -> None:
        super().__init__(daemon=True)
        self.every, self.action, self.stop, self.started = every, action, stop, started
        self.first = min(every, duration / 2)
        self.events: list[dict] = []

    def run(self) -> None:
        for number in range(1, sys.maxsize):
            due = self.started + self.first + (number - 1) * self.every
            if self.stop.wait(max(0.0, due - time.monotonic())):
                return
            begun = time.monotonic()
            try:
                event = self.action(number)
            except Exception as error:  # recorded and counted as a failure: the run goes on
                event = {"error": f"{type(error).__name__}: {error}"[:300]}
            self.events.append({"t": round(begun - self.started, 1), "seconds": round(time.monotonic() - begun, 2)})
            self.events[-1] |= event


def version_switcher(base_url: str, token: str) -> Callable[[int], dict]:
    """Activate `digits` version 1, 2, 1, ... and wait until it serves."""
    switch = console_switcher(base_url, token, SWITCHED)

    def action(number: int) -> dict:
        version = 2 if number % 2 else 1
        switch(version)
        return {"version": version}

    return action


def version_uploader(base_url: str, token: str, model_file: bytes) -> Callable[[int], dict]:
    """Upload `simple`'s model file as a new active version, wait until it serves, delete the one uploaded before."""
    auth = {"Authorization": f"Token {token}"}
    versions = f"{base_url}/api/models/{UPLOADED}/versions"
    uploaded: list[int] = []

    def action(number: int) -> dict:
        client = UploadClient(base_url, token)
        try:
            status, answer = client.upload(UPLOADED, "model.onnx", model_file, activate="true", notes=f"soak {number}")
        finally:
            client.close()
        if status != 201:
            raise NotAvailable(f"the upload answered {status}: {answer}")
        version = answer["number"]
        wait_until(
            lambda: call_api(f"{versions}/{version}/", None, auth, method="GET").get("is_serving"),
            f"serving uploaded version {version}",
        )
        if uploaded:
            call_api(f"{versions}/{uploaded.pop()}/", None, auth, method="DELETE")
        uploaded.append(version)
        return {"version": version}

    return action


def soak(settings: SoakSettings) -> dict:
    """Run the soak; its figures as soak.json holds them."""
    home = ConsoleHome(settings.out / "home")
    shutil.rmtree(home.workdir, ignore_errors=True)
    home.workdir.mkdir(parents=True)
    port = free_port()
    command = [PYTHON, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port)]
    spec = ServerSpec(
        "infera-soak",
        [*command, "--no-access-log", "--grpc-port", "0"],  # gRPC off: nothing to collide on
        port,
        env=home.env | SERVER_ENV,
        ready_timeout_s=600,  # migrations, training the digits demo, loading every model
        ready_models=DEMO_MODELS,
    )
    with ServerProcess(spec, settings.out / "logs") as server:
        token, cookie = home.api_token(), home.session_cookie()
        base = spec.base_url
        mix = Mix(base, demo_streams(home.store), settings.pause_ms / 1000)
        switcher = version_switcher(base, token)
        uploader = version_uploader(base, token, (home.store / UPLOADED / "1" / "model.onnx").read_bytes())
        dashboards = DashboardProcess(base.replace("http://", "ws://") + "/ws/metrics/", cookie)
        try:
            dashboards.command(f"open {settings.dashboards}")
            return drive(settings, server, mix, switcher, uploader, dashboards)
        finally:
            dashboards.stop()


def drive(
    settings: SoakSettings,
    server: ServerProcess,
    mix: Mix,
    switcher: Callable[[int], dict],
    uploader: Callable[[int], dict],
    dashboards: DashboardProcess,
) -> dict:
    """The run itself: traffic, switches and uploads in threads; footprint samples and windows on this one."""
    stop = threading.Event()
    load_at_start = load_average()
    started = time.monotonic()
    traffic = threading.Thread(target=run_load, args=(mix.run(stop),), daemon=True)
    duration = settings.minutes * 60
    switches = Periodic(settings.switch_every, switcher, stop, started, duration)
    uploads = Periodic(settings.upload_every, uploader, stop, started, duration)
    mix.swap()
    for thread in (traffic, switches, uploads):
        thread.start()
    pid = server.process.pid
    samples = [{"t": 0.0, **footprint(pid).as_dict()}]
    windows: list[dict] = []
    phases = Phases(started, min(PHASE_S, duration / 2), duration)
    end = started + duration
    next_sample, next_window = started + settings.sample_every, started + settings.window
    try:
        while (now := time.monotonic()) < end:
            if server.process.poll() is not None:
                raise NotAvailable(f"the server exited with {server.process.returncode}: {server.log_tail()}")
            if now >= next_window:
                windows.append(phases.close(mix.swap(), now))
                next_window += settings.window
                print_window(windows[-1], samples[-1])
            if now >= next_sample:
                samples.append({"t": round(now - started, 1), **footprint(pid).as_dict()})
                next_sample += settings.sample_every
            time.sleep(max(0.0, min(next_window, next_sample, end) - time.monotonic()))
    finally:
        stop.set()
        for thread in (traffic, switches, uploads):
            thread.join(timeout=120)
    windows.append(phases.close(mix.swap(), time.monotonic()))
    after = footprint(pid).as_dict()
    messages, seconds = dashboards.command("close").split()[1:]
    return {
        "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "settings": {
            "minutes": settings.minutes,
            "switch_every_s": settings.switch_every,
            "upload_every_s": settings.upload_every,
            "pause_ms": settings.pause_ms,
            "window_s": settings.window,
            "streams": {stream.name: stream.concurrency for stream in mix.streams},
            "cores": usable_cores(),
            "load_average_start": load_at_start,
            "load_average_end": load_average(),
        },
        "windows": windows,
        "phases": phases.figures(),
        "footprint": samples,
        "after": after,
        "switches": switches.events,
        "uploads": uploads.events,
        "dashboards": {"clients": settings.dashboards, "messages": int(messages), "seconds": float(seconds)},
    }


def print_window(window: dict, sample: dict) -> None:
    p99 = f"{window['p99_ms']:.1f}" if window["p99_ms"] is not None else "-"
    print(
        f"  t={window['t']:7.1f} s  {window['requests'] / window['seconds']:7.0f} req/s  p99 {p99:>7} ms  "
        f"errors {window['errors']}  RSS {sample['rss_kb'] / 1024:.0f} MiB  threads {sample['threads']}  "
        f"fds {sample['fds']}  children {sample['children']}",
        flush=True,
    )
    for example in window["examples"]:
        print(f"    {example}", flush=True)


def failures(run: dict) -> int:
    """Requests that failed or were answered wrong, plus switches and uploads that failed."""
    failed_events = sum(1 for event in run["switches"] + run["uploads"] if "error" in event)
    return sum(window["errors"] for window in run["windows"]) + failed_events


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    settings.out.mkdir(parents=True, exist_ok=True)
    print(f"soak: {settings.minutes:g} min against the console process; writing to {settings.out}", flush=True)
    try:
        run = soak(settings)
    except NotAvailable as reason:
        print(f"soak: not available: {reason}", file=sys.stderr)
        return 2
    (settings.out / "soak.json").write_text(json.dumps(run, indent=1))
    write_html(run, settings.out / "report.html")
    if settings.doc is not None:
        write_doc_table(run, settings.doc)
    failed = failures(run)
    print(f"soak: {failed} failures; report {settings.out / 'report.html'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
