"""The traffic section: mlp_small at 64 connections with no policy, a 90/10 canary and a 100% shadow, one process.

An operator sets a policy through the console's management API (PUT /api/models/mlp_small/traffic, an API token);
the reconciler puts it in force in the engine, and a GET on the same URL shows the policy in force and what the
shadow compared. The bench does the same, so the section runs only when it launches the console. Version 1 is the
active one and version 2 the candidate (the same weights: bench/models.py), both loaded before anything is measured.
Each run reads the per-version statistics before and after, so the report shows the canary's split and that the
shadow copied every request, and the server process's CPU time, which the machine's other load moves less than
req/s; the policies' runs rotate (ABC, BCA, CAB) after a warm-up of each, so drift in the shared machine's load
falls on all three alike.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench.hotswap import call_api, console_switcher, wait_until
from bench.http_runs import checked_load
from bench.infera import ConsoleHome, infera_spec, resolve_mode
from bench.models import MLP_SMALL
from bench.servers import NotAvailable, ServerProcess, free_port
from bench.system import process_cpu_seconds, usable_cores
from bench.wrk import WrkRun, WrkScripts, median_run, run_wrk

ACTIVE_VERSION, CANDIDATE = 1, 2
CONCURRENCY = 64
POLICIES = {
    "active": {"mode": "active"},
    "canary": {"mode": "canary", "weights": {str(ACTIVE_VERSION): 90, str(CANDIDATE): 10}},
    "shadow": {"mode": "shadow", "candidate": CANDIDATE, "shadow_share": 1.0},
}
SETTLE_S = 30.0  # the longest wait for a run's last shadow copies to be compared


class TrafficConsole:
    """mlp_small's traffic through the console's management API, as an operator with an API token calls it."""

    def __init__(self, base_url: str, token: str) -> None:
        self.url = f"{base_url}/api/models/{MLP_SMALL.name}/traffic"
        self.auth = {"Authorization": f"Token {token}"}

    def status(self) -> dict:
        """The desired policy, the one in force in the engine, and what the shadow compared."""
        return call_api(self.url, None, self.auth, method="GET")

    def apply(self, policy: dict) -> None:
        """Make `policy` the desired one and wait until the reconciler has put it in force."""
        call_api(self.url, policy, self.auth, method="PUT")
        wait_until(lambda: in_force(self.status(), policy["mode"]), f"the {policy['mode']} policy in force")


def in_force(status: dict, mode: str) -> bool:
    """Whether the engine applies the desired policy, which is of `mode`."""
    return status["policy"]["mode"] == mode and status.get("in_force") == status["policy"]


def version_counts(base_url: str, model: str = MLP_SMALL.name) -> dict[int, list[int]]:
    """Each loaded version's [inference_count, execution_count], from one read of the model's statistics."""
    with urllib.request.urlopen(f"{base_url}/v2/models/{model}/stats", timeout=30) as response:
        stats = json.loads(response.read())
    return {
        int(entry["version"]): [int(entry.get("inference_count", 0)), int(entry.get("execution_count", 0))]
        for entry in stats.get("model_stats", [])
        if entry.get("name") == model
    }


def shadow_counts(status: dict) -> dict[str, int]:
    """The shadow's counters in a traffic status: copies the candidate ran (compared or failed), outputs that agreed
    and that disagreed with the active version's, and failed copies."""
    shadow = status.get("shadow") or {}
    outputs = (shadow.get("outputs") or {}).values()
    failures = int(shadow.get("candidate_failures") or 0)
    return {
        "copies": max((o["agree"] + o["disagree"] for o in outputs), default=0) + failures,
        "agree": sum(o["agree"] for o in outputs),
        "disagree": sum(o["disagree"] for o in outputs),
        "failures": failures,
    }


def increase(before: dict, after: dict) -> dict:
    """`after` less `before` key by key, a list item by item; a key only `after` has counts from zero."""
    grown = {}
    for key, value in after.items():
        if isinstance(value, list):
            grown[key] = [b - a for a, b in zip(before.get(key) or [0] * len(value), value, strict=True)]
        else:
            grown[key] = value - before.get(key, 0)
    return grown


@dataclass
class PolicyRun:
    """One wrk run under one policy, with what each version served and what the shadow compared meanwhile."""

    wrk: WrkRun
    served: dict[int, list[int]]  # version -> [inferences, executions]
    shadow: dict[str, int] = field(default_factory=dict)
    cpu_s: float = 0.0  # the server process's CPU time over the run (and the shadow's catch-up)


@dataclass(frozen=True)
class Server:
    """The server under test: where it answers, and its process (whose CPU time each run reads)."""

    base_url: str
    pid: int


def run_policy(server: Server, console: TrafficConsole, url: str, script: Path, mode: str, seconds: float) -> PolicyRun:
    """One run under the policy in force; under a shadow, the counters are read once its copies have caught up."""
    shadow_before, before = shadow_counts(console.status()), version_counts(server.base_url)
    cpu_before = process_cpu_seconds(server.pid)
    run = run_wrk(url, script, CONCURRENCY, seconds)
    deadline = time.monotonic() + SETTLE_S
    while True:
        # the comparison first: a copy is compared after the candidate counted it, so the counts read next cover it
        shadow = increase(shadow_before, shadow_counts(console.status())) if mode == "shadow" else {}
        served = increase(before, version_counts(server.base_url))
        if not shadow or caught_up(shadow, served) or time.monotonic() > deadline:
            return PolicyRun(run, served, shadow, process_cpu_seconds(server.pid) - cpu_before)
        time.sleep(0.05)


def caught_up(shadow: dict[str, int], served: dict[int, list[int]]) -> bool:
    """Whether every request answered has had its copy compared, and the candidate's statistics count them all."""
    answered, ran = (served.get(version, [0, 0])[0] for version in (ACTIVE_VERSION, CANDIDATE))
    return shadow["copies"] >= answered and ran >= shadow["copies"]


def median_policy_run(mode: str, runs: list[PolicyRun]) -> dict:
    """wrk's median of the runs, with what each version served and the shadow's counters summed over them."""
    served: dict[int, list[int]] = {}
    for run in runs:
        for version, counts in run.served.items():
            served[version] = [a + b for a, b in zip(served.get(version, [0, 0]), counts, strict=True)]
    total = sum(inferences for inferences, _ in served.values())
    shadow: dict[str, int] = {}
    for run in runs:
        shadow = {key: shadow.get(key, 0) + value for key, value in run.shadow.items()}
    answered = total - shadow.get("copies", 0)
    return median_run([r.wrk for r in runs]) | {
        "policy": mode,
        "served": {str(version): counts for version, counts in sorted(served.items())},
        "candidate_share": served.get(CANDIDATE, [0, 0])[0] / total if total else 0.0,
        "shadow": shadow or None,
        "cpu_us_per_answer": sum(r.cpu_s for r in runs) / answered * 1e6 if answered > 0 else None,
    }


def measure_traffic(
    server: Server, console: TrafficConsole, repository: Path, scripts: WrkScripts, seconds: float, runs: int
) -> list[dict]:
    """A row per policy, the median of `runs` runs rotating among the policies; the active policy again after."""
    url, script = checked_load(server.base_url, MLP_SMALL.name, repository, scripts)
    modes = list(POLICIES)
    measured: dict[str, list[PolicyRun]] = {mode: [] for mode in modes}
    try:
        for i, mode in enumerate(modes):  # warm-up, the candidate's batcher and session too; a fresh server longer
            console.apply(POLICIES[mode])
            run_wrk(url, script, CONCURRENCY, 1.0 if i else seconds)
        for i in range(runs):
            shift = i % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                console.apply(POLICIES[mode])
                measured[mode].append(run_policy(server, console, url, script, mode, seconds))
    finally:
        console.apply(POLICIES["active"])
    rows = []
    for mode, mode_runs in measured.items():
        row = median_policy_run(mode, mode_runs)
        rows.append(row)
        shadow = row["shadow"]
        extra = f"server CPU {row['cpu_us_per_answer'] or 0:.0f} µs/answer, "
        extra += f"version {CANDIDATE} ran {row['candidate_share'] * 100:.1f}% of inferences"
        if shadow:
            extra += f", copies {shadow['copies']} ({shadow['agree']} agree, {shadow['disagree']} disagree)"
        print(
            f"  {mode:7} {row['rps']:8.0f} req/s  p50 {row['p50_ms']:7.3f} ms  p99 {row['p99_ms']:7.3f} ms  "
            f"errors {row['errors']}  {extra}",
            flush=True,
        )
    return rows


def traffic_section(
    repository: Path,
    workdir: Path,
    log_folder: Path,
    scripts: WrkScripts,
    launch: str,
    queue_delay_us: int,
    seconds: float,
    runs: int,
) -> dict:
    """The three policies on mlp_small in one console process under uvicorn; NotAvailable without the console."""
    mode = resolve_mode(launch)
    if mode != "console":
        raise NotAvailable("traffic policies are set through the console's API, and this run launches the engine alone")
    spec = infera_spec("uvicorn", free_port(), repository, workdir / "traffic", mode)
    spec.ready_models, spec.name = [MLP_SMALL.name], "infera-traffic"
    with ServerProcess(spec, log_folder) as process:
        token = ConsoleHome(workdir / "traffic").api_token()
        console_switcher(spec.base_url, token)(ACTIVE_VERSION)  # both versions READY, version 1 active
        server = Server(spec.base_url, process.process.pid)
        rows = measure_traffic(server, TrafficConsole(spec.base_url, token), repository, scripts, seconds, runs)
    return {
        "rows": rows,
        "policies": POLICIES,
        "active_version": ACTIVE_VERSION,
        "candidate": CANDIDATE,
        "concurrency": CONCURRENCY,
        "queue_delay_us": queue_delay_us,
        "seconds": seconds,
        "runs": runs,
        "launch": mode,
        "cores": usable_cores(),
    }
