"""The dashboards run: inference throughput at 64 connections with 50 open /ws/metrics/ clients versus none."""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path

from bench.http_runs import checked_load
from bench.models import MLP_SMALL
from bench.servers import PYTHON, ROOT, NotAvailable, ServerSpec
from bench.wrk import WrkScripts, run_wrk

CLIENTS = 50
ORDER = (False, True, True, False, False, True, True, False)  # four runs each way, balanced in time


class DashboardProcess:
    """bench.ws_clients in its own process, so its reads cost what a browser's would and not the server's."""

    def __init__(self, ws_url: str, cookie: str) -> None:
        self.process = subprocess.Popen(
            [PYTHON, "-m", "bench.ws_clients", ws_url, cookie],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def command(self, line: str) -> str:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().strip()
        if not answer or answer.startswith("error"):
            raise NotAvailable(f"WebSocket clients: {answer or 'exited'}")
        return answer

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


def run_dashboards(spec: ServerSpec, cookie: str, repository: Path, scripts: WrkScripts, seconds: float) -> dict:
    """Runs without and with CLIENTS dashboards open, in ABBA order; the cost is the drop between the medians."""
    url, script = checked_load(spec.base_url, MLP_SMALL.name, repository, scripts)
    dashboards = DashboardProcess(spec.base_url.replace("http://", "ws://") + "/ws/metrics/", cookie)
    without, with_clients, messages_per_s = [], [], []
    try:
        dashboards.command(f"open {CLIENTS}")  # fails fast when the endpoint or the sign-in is missing
        dashboards.command("close")
        run_wrk(url, script, 64, seconds)  # a full warm-up: a server still warming would favour the later runs
        for with_open in ORDER:  # ABBA: drift in the shared machine's load and in the server falls on both sides
            if with_open:
                dashboards.command(f"open {CLIENTS}")
                with_clients.append(run_wrk(url, script, 64, seconds).rps)
                _, messages, elapsed = dashboards.command("close").split()
                messages_per_s.append(int(messages) / float(elapsed) / CLIENTS)
            else:
                without.append(run_wrk(url, script, 64, seconds).rps)
    finally:
        dashboards.stop()
    rps_without, rps_with = statistics.median(without), statistics.median(with_clients)
    return {
        "clients": CLIENTS,
        "rps_without": rps_without,
        "rps_with": rps_with,
        "cost": 1 - rps_with / rps_without if rps_without else 0.0,
        "snapshots_per_client_s": statistics.median(messages_per_s),
        "runs_without": without,
        "runs_with": with_clients,
    }
