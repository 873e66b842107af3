"""The traffic section: policies set through a fake console, per-version counts, the shadow's catch-up, the
verdicts, and a partial run rewriting its section and its Targets rows."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench import traffic_runs
from bench.report import TRAFFIC_HEADING, with_target_rows, write_outputs
from bench.servers import NotAvailable
from bench.targets import CANARY_TARGET, SHADOW_TARGET, Verdict, canary_verdict, shadow_verdict
from bench.traffic_runs import (
    POLICIES,
    PolicyRun,
    Server,
    TrafficConsole,
    caught_up,
    increase,
    median_policy_run,
    run_policy,
    shadow_counts,
    traffic_section,
    version_counts,
)
from bench.wrk import WrkRun

TOKEN = "bench-token"


class FakeConsole:
    """The console's traffic API and the model's statistics, over real HTTP.

    A policy comes in force at the second read after the answer to its PUT; a shadow's copies of a run are compared
    `batch` at a time, one batch per read of the traffic status, each counted by the candidate as it is compared.
    """

    def __init__(self, batch: int = 40) -> None:
        self.desired: dict = {"mode": "active"}
        self.in_force: dict = dict(self.desired)
        self.reads_until_in_force = 0
        self.counts = {1: [0, 0], 2: [0, 0]}  # version -> [inferences, executions]
        self.agree = self.pending = 0
        self.batch = batch
        self.puts: list[tuple[str, dict]] = []

    def status(self) -> dict:
        if self.reads_until_in_force:
            self.reads_until_in_force -= 1
            if not self.reads_until_in_force:
                self.in_force = dict(self.desired)
        copied = min(self.batch, self.pending)
        self.pending -= copied
        self.agree += copied
        self.counts[2] = [self.counts[2][0] + copied, self.counts[2][1] + (1 if copied else 0)]
        shadow = {"outputs": {"OUTPUT0": {"agree": self.agree, "disagree": 0}}, "candidate_failures": 0}
        return {"policy": self.desired, "in_force": self.in_force, "shadow": shadow if self.agree else None}

    def answer(self, requests: int) -> None:
        """What a run of `requests` does: version 1 answers all (the tests' canary sends none to 2), a shadow copies."""
        self.counts[1] = [self.counts[1][0] + requests, self.counts[1][1] + requests // 10]
        if self.desired["mode"] == "shadow":
            self.pending += requests

    def stats(self) -> dict:
        return {
            "model_stats": [
                {"name": "mlp_small", "version": str(v), "inference_count": c[0], "execution_count": c[1]}
                for v, c in self.counts.items()
            ]
            + [{"name": "other", "version": "1", "inference_count": 99, "execution_count": 9}]
        }

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/v2/models/mlp_small/stats":
                    self.reply(200, fake.stats())
                elif self.path == "/api/models/mlp_small/traffic":
                    self.reply(200, fake.status())
                else:
                    self.reply(404, {"error": "no route"})

            def do_PUT(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.puts.append((self.headers["Authorization"], body))
                fake.desired = {"mode": "active", "weights": {}} | body
                fake.reads_until_in_force = 3
                self.reply(202, fake.status())

            def reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


@pytest.fixture
def console() -> Iterator[tuple[FakeConsole, str]]:
    fake = FakeConsole()
    server = ThreadingHTTPServer(("127.0.0.1", 0), fake.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_it_sets_a_policy_through_the_console_api_and_waits_until_it_is_in_force(console):
    fake, url = console
    TrafficConsole(url, TOKEN).apply(POLICIES["canary"])
    assert fake.puts == [(f"Token {TOKEN}", POLICIES["canary"])]
    assert fake.in_force == fake.desired and fake.in_force["mode"] == "canary"


def test_it_reads_each_version_of_the_model_from_one_stats_read(console):
    fake, url = console
    fake.counts = {1: [120, 12], 2: [30, 9]}
    assert version_counts(url) == {1: [120, 12], 2: [30, 9]}


def _wrk(requests: int) -> WrkRun:
    return WrkRun(requests, 1_000_000, 5000.0, 6000.0, 9000.0, 5100.0, 12000.0, 0, 0, 0)


def test_a_shadow_run_is_read_once_every_answer_has_its_copy_compared(console, monkeypatch):
    fake, url = console
    fake.desired = fake.in_force = dict(POLICIES["shadow"])
    fake.counts = {1: [1000, 100], 2: [1000, 30]}
    fake.agree = 1000  # an earlier run's copies, left out of this one

    def wrk(*args: object) -> WrkRun:
        fake.answer(200)
        return _wrk(200)

    monkeypatch.setattr(traffic_runs, "run_wrk", wrk)
    run = run_policy(Server(url, os.getpid()), TrafficConsole(url, TOKEN), url, None, "shadow", 1.0)
    assert run.served[1] == [200, 20] and run.served[2][0] == 200
    assert run.shadow == {"copies": 200, "agree": 200, "disagree": 0, "failures": 0}
    assert fake.pending == 0


def test_an_unshadowed_run_reads_the_counts_once(console, monkeypatch):
    fake, url = console

    def wrk(*args: object) -> WrkRun:
        fake.answer(50)
        return _wrk(50)

    monkeypatch.setattr(traffic_runs, "run_wrk", wrk)
    run = run_policy(Server(url, os.getpid()), TrafficConsole(url, TOKEN), url, None, "active", 1.0)
    assert (run.served, run.shadow) == ({1: [50, 5], 2: [0, 0]}, {})
    assert run.cpu_s >= 0.0  # this process stands in for the server


def test_it_counts_copies_once_per_request_whatever_the_outputs():
    status = {
        "shadow": {
            "outputs": {"A": {"agree": 8, "disagree": 2}, "B": {"agree": 10, "disagree": 0}},
            "candidate_failures": 3,
        }
    }
    assert shadow_counts(status) == {"copies": 13, "agree": 18, "disagree": 2, "failures": 3}
    assert shadow_counts({"shadow": None}) == {"copies": 0, "agree": 0, "disagree": 0, "failures": 0}


def test_it_takes_the_increase_of_counters_and_of_per_version_lists():
    assert increase({"copies": 5}, {"copies": 9}) == {"copies": 4}
    assert increase({1: [10, 2]}, {1: [15, 3], 2: [4, 1]}) == {1: [5, 1], 2: [4, 1]}


def test_the_shadow_has_caught_up_only_when_every_answer_was_copied_and_counted():
    served = {1: [100, 10], 2: [100, 4]}
    assert caught_up({"copies": 100}, served)
    assert not caught_up({"copies": 99}, served)
    assert not caught_up({"copies": 100}, {1: [100, 10], 2: [98, 4]})


def test_it_sums_what_each_version_served_and_the_shadow_saw_over_the_runs():
    runs = [
        PolicyRun(_wrk(900), {1: [900, 30], 2: [100, 20]}, cpu_s=0.1),
        PolicyRun(_wrk(1000), {1: [910, 31], 2: [90, 19]}, cpu_s=0.1),
        PolicyRun(_wrk(800), {1: [890, 29], 2: [110, 21]}, cpu_s=0.1),
    ]
    row = median_policy_run("canary", runs)
    assert row["rps"] == 900 and row["policy"] == "canary"
    assert row["served"] == {"1": [2700, 90], "2": [300, 60]}
    assert row["candidate_share"] == pytest.approx(0.1) and row["shadow"] is None
    assert row["cpu_us_per_answer"] == pytest.approx(100.0)


def test_a_shadows_copies_are_summed_and_its_cpu_is_per_answer_not_per_copy():
    shadowed = [PolicyRun(_wrk(500), {1: [500, 9], 2: [500, 8]}, {"copies": 500, "agree": 500}, 0.1)] * 2
    row = median_policy_run("shadow", shadowed)
    assert row["shadow"] == {"copies": 1000, "agree": 1000}
    assert row["candidate_share"] == 0.5 and row["cpu_us_per_answer"] == pytest.approx(200.0)


def test_it_needs_the_console_to_set_a_policy(tmp_path):
    with pytest.raises(NotAvailable, match="set through the console's API"):
        traffic_section(tmp_path, tmp_path, tmp_path, None, "standalone", 100, 1.0, 1)


def _row(policy: str, rps: float, share: float = 0.0, errors: int = 0) -> dict:
    answers = {"1": round(rps * 15 * (1 - share)), "2": round(rps * 15 * share)}
    served = {version: [count, count // (30 if version == "1" else 5)] for version, count in answers.items()}
    shadow = None
    if policy == "shadow":
        served["2"] = [served["1"][0], served["1"][0] // 40]
        shadow = {"copies": served["1"][0], "agree": served["1"][0], "disagree": 0, "failures": 0}
    return {
        "policy": policy,
        "rps": rps,
        "p50_ms": {"active": 5.0, "canary": 5.5, "shadow": 7.0}[policy],
        "p99_ms": 20.0,
        "errors": errors,
        "runs": [{"rps": rps - 100}, {"rps": rps}, {"rps": rps + 50}],
        "served": served,
        "candidate_share": 0.5 if shadow else share,
        "shadow": shadow,
        "cpu_us_per_answer": {"active": 80.0, "canary": 95.5, "shadow": 150.0}[policy],
    }


def _run(canary_rps: float, share: float = 0.1, errors: int = 0) -> dict:
    return {
        "rows": [_row("active", 10000), _row("canary", canary_rps, share, errors), _row("shadow", 7000)],
        "policies": POLICIES,
        "active_version": 1,
        "candidate": 2,
        "concurrency": 64,
        "queue_delay_us": 100,
        "seconds": 5.0,
        "runs": 3,
        "launch": "console",
        "cores": 2,
        "date": "2026-12-01 00:00 UTC",
        "command": "python -m bench --sections traffic",
    }


def test_a_canary_passes_within_five_percent_of_no_policy_when_the_candidate_got_its_share():
    assert canary_verdict(_run(9500)).status == "PASS"
    assert canary_verdict(_run(9499)).status == "MISS"
    assert canary_verdict(_run(9900, errors=2)).status == "MISS"
    missed = canary_verdict(_run(9900, share=0.0))
    assert (missed.status, missed.measured) == ("MISS", "0.99× (9900 vs 10000 req/s); the candidate took 0.0%")


def test_a_shadow_is_reported_with_the_copies_it_compared():
    verdict = shadow_verdict(_run(9500))
    assert verdict.status == "INFO"
    assert verdict.measured == (
        "0.70× (7000 vs 10000 req/s); 105000 copies of 105000 requests, 105000 agreed, 0 disagreed, 0 failed"
    )


def test_a_text_without_the_targets_table_keeps_it():
    assert with_target_rows("kept", [Verdict("t", "g", "m", "PASS")]) == "kept"


def test_a_traffic_only_run_rewrites_its_section_and_its_target_rows(tmp_path):
    out = tmp_path / "benchmarks.md"
    out.write_text(
        "# Benchmarks\n\nGenerated earlier.\n\n## Targets\n\n"
        "| target | goal | measured | result |\n| --- | --- | --- | --- |\n"
        "| hot swap: failed requests over 10 switches | 0 | 0 | PASS |\n"
        f"| {CANARY_TARGET} | old | old | N/A |\n\n"
        "## Ensembles: digits_pipeline vs the client chaining its steps\n\nensemble\n\n"
        "## GPU path (bench/gpu.sh)\n\ngpu\n"
    )
    run = _run(9700)
    results = {"date": run["date"], "command": run["command"], "system": {}, "settings": {}, "traffic": run}
    write_outputs(results, out, tmp_path / "results", ["traffic"])
    text = out.read_text()
    canary, shadow = canary_verdict(run), shadow_verdict(run)
    assert text.startswith(
        "# Benchmarks\n\nGenerated earlier.\n\n## Targets\n\n"
        "| target | goal | measured | result |\n| --- | --- | --- | --- |\n"
        "| hot swap: failed requests over 10 switches | 0 | 0 | PASS |\n"
        f"| {CANARY_TARGET} | {canary.goal} | {canary.measured} | PASS |\n"
        f"| {SHADOW_TARGET} | {shadow.goal} | {shadow.measured} | INFO |\n\n"
        "## Ensembles: digits_pipeline vs the client chaining its steps\n\nensemble\n\n## " + TRAFFIC_HEADING
    )
    assert text.endswith("## GPU path (bench/gpu.sh)\n\ngpu\n")
    assert "| canary | 9700 | 5.500 | 20.000 | 9600–9750 | 0.97 | 96 | 0 |" in text
    assert "| canary | 130950 (30.0) | 14550 (5.0) | 10.0% | 50 | - | - | - | - |" in text
    assert "| shadow | 105000 (30.0) | 105000 (40.0) | 50.0% | 58 | 105000 | 105000 | 0 | 0 |" in text
    assert "| canary | 0.97 | +0.500 | ≥ 0.95× (candidate 10% ± 5 points) | PASS |" in text
    assert '`canary` `{"mode": "canary", "weights": {"1": 90, "2": 10}}`' in text


def test_the_bench_console_lets_its_admin_poll_the_management_api_every_20_ms(tmp_path) -> None:
    from bench.infera import ConsoleHome
    from console.config import api_rate

    count, _, unit = api_rate(ConsoleHome(tmp_path).env["INFERA_API_RATE"]).partition("/")
    assert unit == "min" and int(count) >= 60 / 0.02  # 429s had cost the traffic section its run
