"""The hot-swap run: 64 clients on mlp_small while its active version switches 10 times; failures and p99."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from bench.http_runs import checked_load
from bench.models import MLP_SMALL
from bench.servers import NotAvailable, ServerSpec
from bench.wrk import WrkScripts, median_run, run_wrk

Switcher = Callable[[int], None]  # activates one version of a model (mlp_small in the hot-swap run); raises on failure
SWITCHES = 10


def call_api(url: str, body: dict | None, headers: dict[str, str], method: str = "POST") -> dict:
    """One JSON call (a POST or PUT sends `body`); its JSON answer, NotAvailable with the reason when refused."""
    data = json.dumps(body or {}).encode() if method in ("POST", "PUT") else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read()
    except urllib.error.HTTPError as error:
        raise NotAvailable(
            f"{method} {url} answered {error.code}: {error.read()[:300].decode(errors='replace')}"
        ) from None
    return json.loads(text) if text.strip().startswith(b"{") else {}


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Poll `check` until it holds; NotAvailable naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise NotAvailable(f"{what} did not happen within {timeout_s:.0f} s")
        time.sleep(0.02)


def console_switcher(base_url: str, token: str, model: str = MLP_SMALL.name) -> Switcher:
    """Switch `model` through the console's REST API (activate, then wait until the engine serves that version).

    Loads version 1 first: importing the repository marks only the newest version to load.
    """
    auth = {"Authorization": f"Token {token}"}
    versions = f"{base_url}/api/models/{model}/versions"

    def detail(version: int) -> dict:
        return call_api(f"{versions}/{version}/", None, auth, method="GET")

    for version in (1, 2):
        if detail(version).get("state") != "READY":
            call_api(f"{versions}/{version}/load", None, auth)
            wait_until(lambda v=version: detail(v).get("state") == "READY", f"loading version {version}")

    def switch(version: int) -> None:
        call_api(f"{versions}/{version}/activate", None, auth)
        wait_until(lambda: bool(detail(version).get("is_serving")), f"serving version {version} after activation")

    return switch


def repository_switcher(base_url: str) -> Switcher:
    """Switch through the v2 repository extension: reload with a version policy naming the one version, then
    wait until unversioned requests are answered by it."""
    zeros = {"inputs": [{"name": "INPUT0", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}]}
    infer = f"{base_url}/v2/models/{MLP_SMALL.name}/infer"

    def switch(version: int) -> None:
        config = json.dumps({"version_policy": {"specific": {"versions": [version]}}})
        call_api(f"{base_url}/v2/repository/models/{MLP_SMALL.name}/load", {"parameters": {"config": config}}, {})
        wait_until(
            lambda: call_api(infer, zeros, {}).get("model_version") == str(version), f"serving version {version}"
        )

    return switch


def run_hotswap(spec: ServerSpec, switch: Switcher, repository: Path, scripts: WrkScripts, seconds: float) -> dict:
    """Steady wrk runs, then wrk runs during which the version switches SWITCHES times; both at 64 connections."""
    url, script = checked_load(spec.base_url, MLP_SMALL.name, repository, scripts)
    for version in (1, 2):  # proves both versions can be activated before anything is measured
        switch(version)
    run_wrk(url, script, 64, seconds)  # a full warm-up, so steady state is not measured on a cold server
    steady = median_run([run_wrk(url, script, 64, seconds) for _ in range(3)])

    window = max(2 * seconds, 6.0)
    switch_times: list[float] = []
    switch_errors: list[str] = []

    def switch_loop() -> None:
        begin = time.perf_counter()
        for i in range(SWITCHES):
            # evenly spread over the window, never past its end, whatever one switch takes
            time.sleep(max(0.0, begin + window * (i + 1) / (SWITCHES + 1) - time.perf_counter()))
            started = time.perf_counter()
            try:
                switch(1 if i % 2 == 0 else 2)
            except Exception as error:  # recorded, the run goes on: the table shows it
                switch_errors.append(str(error)[:200])
            switch_times.append(time.perf_counter() - started)

    switcher = threading.Thread(target=switch_loop, daemon=True)
    switcher.start()
    during = run_wrk(url, script, 64, window)
    switcher.join(timeout=120)
    return {
        "steady": steady,
        "during": median_run([during]),
        "switches": len(switch_times),
        "switch_errors": switch_errors,
        "switch_s_max": max(switch_times, default=0.0),
        "window_s": window,
    }
