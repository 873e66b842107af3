"""The `cluster` section: throughput through HAProxy with 1, 2 and 3 replicas, and how long a switch of the active
version takes to reach every replica.

One local cluster of three replicas (deploy/local.py: its own PostgreSQL database and redis-server) serves
mlp_small, uploaded through the API with its two versions. For 1 and 2 replicas the others are put in HAProxy's
maintenance (they idle, holding their memory), so the three figures come from the same processes. A switch is timed
from the activation request until every replica, asked directly, answers with the new version.
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

import httpx

from bench.models import MLP_SMALL, config_pbtxt
from bench.payloads import json_payload
from bench.servers import NotAvailable
from bench.system import load_average, usable_cores
from bench.wrk import WrkScripts, median_run, run_wrk
from deploy.local import ClusterError, LocalCluster

REPLICAS = (1, 2, 3)
SWITCHES = 20
CONCURRENCY = 64
SWITCH_TIMEOUT_S = 30.0
ENV = {
    "INFERA_INFERENCE_AUTH": "none",
    "INFERA_LOG_LEVEL": "WARNING",
    "INFERA_DISABLE_NVML": "1",
}


def cluster_section(repository: Path, workdir: Path, scripts: WrkScripts, seconds: float, runs: int) -> dict:
    """The section's figures; NotAvailable when the machine cannot start a cluster (no haproxy, no PostgreSQL)."""
    cluster = LocalCluster(max(REPLICAS), workdir=workdir / "cluster", database=None, redis_url=None, env=ENV)
    try:
        cluster.start()
    except ClusterError as exc:
        raise NotAvailable(str(exc)) from None
    try:
        key = cluster.manage("issue_token", "admin", "--name", "bench").splitlines()[-1]
        api = httpx.Client(base_url=cluster.urls[0], headers={"Authorization": f"Token {key}"}, timeout=120)
        upload_versions(api, repository)
        payload = json_payload(MLP_SMALL, repository)
        script = scripts.script("cluster-mlp_small-json", payload.body, payload.headers)
        rows = []
        for count in REPLICAS:
            cluster.balance_over(count)
            url = f"{cluster.url}/v2/models/{MLP_SMALL.name}/infer"
            row = median_run([run_wrk(url, script, CONCURRENCY, seconds) for _ in range(runs)])
            rows.append({"replicas": count, **row})
            print(f"  {count} replicas: {row['rps']:.0f} req/s, p99 {row['p99_ms']:.1f} ms, {row['errors']} errors")
        cluster.balance_over(max(REPLICAS))
        switches = [time_switch(api, cluster.urls, 2 - n % 2, payload.body) for n in range(SWITCHES)]
        print(f"  switch reaches all: p50 {statistics.median(switches) * 1000:.0f} ms, max {max(switches) * 1000:.0f}")
        api.close()
    finally:
        cluster.stop()
    return {
        "rows": rows,
        "switch_s": switches,
        "concurrency": CONCURRENCY,
        "seconds": seconds,
        "runs": runs,
        "cores": usable_cores(),
        "load_average": load_average(),
    }


def upload_versions(api: httpx.Client, repository: Path) -> None:
    """Register mlp_small and upload its two versions (the second not active)."""
    api.post("/api/models/", json={"name": MLP_SMALL.name}).raise_for_status()
    for version in range(1, MLP_SMALL.versions + 1):
        model = (repository / MLP_SMALL.name / str(version) / "model.onnx").read_bytes()
        files = {"file": ("model.onnx", model), "config": ("config.pbtxt", config_pbtxt(MLP_SMALL))}
        api.post(f"/api/models/{MLP_SMALL.name}/versions/", files=files).raise_for_status()


def time_switch(api: httpx.Client, urls: list[str], version: int, body: bytes) -> float:
    """Seconds from asking for `version` to be active until every replica answers with it."""
    reached: dict[str, float] = {}
    start = time.monotonic()

    def watch(url: str) -> None:
        with httpx.Client(timeout=10) as client:
            while time.monotonic() - start < SWITCH_TIMEOUT_S:
                answer = client.post(f"{url}/v2/models/{MLP_SMALL.name}/infer", content=body)
                if answer.status_code == 200 and answer.json()["model_version"] == str(version):
                    reached[url] = time.monotonic() - start
                    return

    watchers = [threading.Thread(target=watch, args=(url,)) for url in urls]
    for thread in watchers:
        thread.start()
    api.post(f"/api/models/{MLP_SMALL.name}/versions/{version}/activate").raise_for_status()
    for thread in watchers:
        thread.join()
    if len(reached) < len(urls):
        raise RuntimeError(f"version {version} did not reach every replica within {SWITCH_TIMEOUT_S:.0f} s")
    return max(reached.values())
