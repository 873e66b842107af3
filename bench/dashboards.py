"""The dashboards run: inference throughput at 64 connections with 50 open /ws/metrics/ clients versus none."""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path

from bench.http_runs import infer_url, probe
from bench.models import MLP_SMALL
from bench.payloads import make_payload
from bench.servers import PYTHON, ROOT, NotAvailable, ServerSpec
from bench.wrk import WrkScripts, run_wrk

CLIENTS = 50


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
    """Alternate runs without and with CLIENTS dashboards open (three each); the cost is the median drop."""
    payload = make_payload(MLP_SMALL, repository, "json")
    url = infer_url(spec.base_url, MLP_SMALL.name)
    problem = probe(url, payload, check_values=False)
    if problem:
        raise NotAvailable(f"probe failed: {problem}")
    script = scripts.script(f"{MLP_SMALL.name}-json", payload.body, payload.headers)
    dashboards = DashboardProcess(spec.base_url.replace("http://", "ws://") + "/ws/metrics/", cookie)
    without, with_clients, messages_per_s = [], [], []
    try:
        dashboards.command(f"open {CLIENTS}")  # fails fast when the endpoint or the sign-in is missing
        dashboards.command("close")
        run_wrk(url, script, 16, 1)
        for _ in range(3):  # alternating, so a drift in the shared machine's load falls on both sides
            without.append(run_wrk(url, script, 64, seconds).rps)
            dashboards.command(f"open {CLIENTS}")
            with_clients.append(run_wrk(url, script, 64, seconds).rps)
            _, messages, elapsed = dashboards.command("close").split()
            messages_per_s.append(int(messages) / float(elapsed) / CLIENTS)
    finally:
        dashboards.stop()
    rps_without, rps_with = statistics.median(without), statistics.median(with_clients)
    return {
        "clients": CLIENTS,
        "rps_without": rps_without,
        "rps_with": rps_with,
        "cost": 1 - rps_with / rps_without if rps_without else 0.0,
        "snapshots_per_client_s": statistics.median(messages_per_s),
    }
