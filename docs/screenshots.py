"""Screenshots of the console for the README: a real `manage.py serve`, real inference load, headless Chromium.

Run `.venv/bin/python docs/screenshots.py` from the repository root; it writes PNGs (1400x1000) into docs/images/.
The server runs on a free port with a temporary INFERA_VAR_DIR, so nothing under var/ is touched.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
IMAGES = REPO_ROOT / "docs" / "images"
sys.path.insert(0, str(REPO_ROOT))  # run as a script from anywhere: the tests' browser settings are shared

from tests.browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

VIEWPORT = {"width": 1400, "height": 1000}  # the width the browser tests measure pages at
ADMIN_PASSWORD = "screenshots-Admin-2026"
START_TIMEOUT_S = 300  # migrate, torch import and training the digits demo on a small, busy machine
WAIT_MS = 60_000
HOUR_WAIT_MS = 120_000  # until the load has crossed a minute's end
LOAD_SECONDS = 20  # the monitoring page is shot near the end of this, with its charts ~15 s into the load
CHART_POINTS = 15
MAX_PNG_BYTES = 300 * 1024
# a live throughput figure (filled from the metrics stream) that shows a number above zero
LIVE_NUMBER = "Number(document.querySelector('[data-live-model={model}]').textContent.replace(/[^0-9.]/g, '')) > 0"
# WIRE datatype -> a value for one element of a request built from model metadata
SAMPLE_VALUES = {
    "FP32": lambda: round(random.uniform(0, 16), 2),
    "FP64": lambda: round(random.uniform(0, 16), 2),
    "INT32": lambda: random.randint(0, 100),
    "INT64": lambda: random.randint(0, 100),
    "BYTES": lambda: str(random.randint(0, 100)),
}


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Console:
    """A running `manage.py serve` and where it listens."""

    process: subprocess.Popen[bytes]
    base_url: str
    var_dir: Path
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)

    def status_of(self, path: str) -> int:
        """The HTTP status of GET `path` (0 when nothing answers)."""
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            return 0

    def wait_until_ready(self) -> None:
        """Block until /v2/health/ready answers 200; stop with the server's log if it dies or takes too long."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                sys.exit(f"the console exited with {self.process.returncode}:\n{self.log_path.read_text()[-4000:]}")
            if self.status_of("/v2/health/ready") == 200:
                return
            time.sleep(0.5)
        sys.exit(f"the console was not ready after {START_TIMEOUT_S} s:\n{self.log_path.read_text()[-4000:]}")

    def manage(self, *args: str) -> str:
        """Run another manage.py command against the same database; its standard output."""
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=REPO_ROOT, env=self.env, capture_output=True, text=True
        )
        if done.returncode != 0:
            sys.exit(f"manage.py {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout


@contextmanager
def running_console() -> Iterator[Console]:
    """`manage.py serve` on a free port over a temporary INFERA_VAR_DIR, stopped (and the folder removed) after."""
    with tempfile.TemporaryDirectory(prefix="infera-screenshots-") as folder:
        var_dir = Path(folder)
        port = free_port()
        env = os.environ | {
            "INFERA_VAR_DIR": str(var_dir),
            "INFERA_ADMIN_PASSWORD": ADMIN_PASSWORD,
            "INFERA_DISABLE_NVML": "1",
            "PYTHONUNBUFFERED": "1",
        }
        for inherited in ("INFERA_MODEL_STORE", "DATABASE_URL", "REDIS_URL", "INFERA_INFERENCE_AUTH"):
            env.pop(inherited, None)  # everything of this run lives under the temporary folder
        log_path = var_dir / "serve.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "manage.py", "serve", "--port", str(port), "--grpc-port", "0", "--no-access-log"],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            console = Console(process, f"http://127.0.0.1:{port}", var_dir, log_path, env)
            try:
                console.wait_until_ready()
                yield console
            finally:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def request_body(metadata: dict, batch: int) -> bytes:
    """A v2 JSON inference request for the model `metadata` describes: `batch` rows of sample values."""
    inputs = []
    for tensor in metadata["inputs"]:
        shape = [batch if size == -1 else size for size in tensor["shape"]]
        count = 1
        for size in shape:
            count *= size
        make = SAMPLE_VALUES[tensor["datatype"]]
        inputs.append(
            {
                "name": tensor["name"],
                "shape": shape,
                "datatype": tensor["datatype"],
                "data": [make() for _ in range(count)],
            }
        )
    return json.dumps({"inputs": inputs}).encode()


@dataclass
class InferenceLoad:
    """Background threads posting v2 inference requests until stopped, counting answers."""

    base_url: str
    models: tuple[str, ...] = ("simple", "digits", "digits")
    pause_s: float = 0.004  # paced, so two shared cores still have room for the browser
    stop: threading.Event = field(default_factory=threading.Event)
    started_at: float = 0.0
    ok: int = 0
    failed: int = 0
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        host = self.base_url.removeprefix("http://")
        metadata = {}
        for name in set(self.models):
            with urllib.request.urlopen(f"{self.base_url}/v2/models/{name}", timeout=10) as response:
                metadata[name] = json.loads(response.read())
        self.started_at = time.monotonic()
        for index, name in enumerate(self.models):
            thread = threading.Thread(
                target=self._post_until_stopped, args=(host, metadata[name], index), name=f"load-{name}-{index}"
            )
            thread.start()
            self._threads.append(thread)

    def elapsed(self) -> float:
        return time.monotonic() - self.started_at

    def _post_until_stopped(self, host: str, metadata: dict, seed: int) -> None:
        random.seed(seed)
        path = f"/v2/models/{metadata['name']}/infer"
        batch_sizes = [1] if metadata["name"] == "simple" else [1, 1, 2, 4]
        bodies = [request_body(metadata, random.choice(batch_sizes)) for _ in range(32)]
        connection = http.client.HTTPConnection(host, timeout=10)
        while not self.stop.is_set():
            try:
                connection.request("POST", path, random.choice(bodies), {"Content-Type": "application/json"})
                response = connection.getresponse()
                response.read()
                success = response.status == 200
            except (OSError, http.client.HTTPException):
                connection.close()
                connection = http.client.HTTPConnection(host, timeout=10)
                success = False
            with self._lock:
                if success:
                    self.ok += 1
                else:
                    self.failed += 1
            self.stop.wait(self.pause_s)
        connection.close()

    def finish(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=15)


def shoot(page: object, name: str) -> Path:
    """Save the viewport as docs/images/<name>.png and say how big it is."""
    path = IMAGES / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)  # type: ignore[attr-defined]
    size = path.stat().st_size
    warning = "  (over the 300 KB budget)" if size > MAX_PNG_BYTES else ""
    print(f"  {path.relative_to(REPO_ROOT)}: {size // 1024} KB{warning}")
    return path


def zoom(page: object, factor: float) -> None:
    """Zoom the page as a browser's zoom would, so more of it fits in the frame."""
    page.evaluate(f"document.documentElement.style.zoom = '{factor}'")  # type: ignore[attr-defined]


def add_demo_users(console: Console) -> None:
    """A few more accounts, so the users page shows each role."""
    console.manage("create_user", "olivia", "--role", "operator", "--email", "olivia@example.com")
    console.manage("create_user", "victor", "--role", "viewer", "--email", "victor@example.com")
    console.manage("create_user", "batch-client", "--role", "inference")
    console.manage("issue_token", "batch-client", "--name", "nightly-job", "--expires-days", "90")


def take_screenshots(console: Console) -> None:
    """Sign in, send load, and shoot each page once it shows what it is for."""
    from playwright.sync_api import sync_playwright

    base = console.base_url
    load = InferenceLoad(base)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            # Playwright evaluates string predicates (wait_for_function) with eval, which the console's CSP forbids
            context = browser.new_context(viewport=VIEWPORT, bypass_csp=True)
            page = context.new_page()

            page.goto(base + "/accounts/login/")
            page.fill("#id_username", "admin")
            shoot(page, "sign-in")
            page.fill("#id_password", ADMIN_PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(base + "/")

            load.start()
            page.goto(base + "/models/")
            page.wait_for_function(
                "[...document.querySelectorAll('#model-rows [data-field=state]')]"
                ".filter((cell) => cell.textContent === 'READY').length >= 3",
                timeout=WAIT_MS,
            )
            # the live throughput column fills from the metrics stream
            page.wait_for_function(LIVE_NUMBER.format(model="digits"), timeout=WAIT_MS)
            shoot(page, "models")

            # the model's page opens on its Overview tab: serving state, versions and Try it in the first screen
            page.goto(base + "/models/digits/")
            page.wait_for_function(
                "document.querySelectorAll('#version-rows tr[data-version]').length === 2", timeout=WAIT_MS
            )
            page.wait_for_selector("#try-form[data-ready=true]", timeout=WAIT_MS)
            page.wait_for_function(LIVE_NUMBER.format(model="digits"), timeout=WAIT_MS)
            shoot(page, "model-detail")
            page.click("#try-send")  # its default: a real 8x8 digit (a 3)
            page.wait_for_selector("#try-status[data-http-status]", timeout=WAIT_MS)
            page.click("summary:has-text('The same request from code')")
            page.evaluate("document.querySelector('#try-form').closest('section').scrollIntoView()")
            shoot(page, "model-try-it")

            page.goto(base + "/monitoring/")
            page.wait_for_function(
                "document.getElementById('connection-state').dataset.state === 'live'", timeout=WAIT_MS
            )
            remaining = LOAD_SECONDS - load.elapsed()
            if remaining > 0:
                page.wait_for_timeout(remaining * 1000)  # a screenshot of load, not a test: time is the point
            page.wait_for_function(
                f"Number(document.getElementById('monitoring').dataset.points) >= {CHART_POINTS}", timeout=WAIT_MS
            )
            page.wait_for_function(
                "document.getElementById('chart-throughput').data.some("
                "(trace) => trace.name === 'digits' && trace.y.filter((y) => y > 0).length >= "
                f"{CHART_POINTS})",
                timeout=WAIT_MS,
            )
            page.wait_for_timeout(600)  # Plotly's last redraw
            shoot(page, "monitoring")

            page.goto(base + "/")
            page.wait_for_function(
                "document.getElementById('connection-state').dataset.state === 'live'", timeout=WAIT_MS
            )
            page.wait_for_function(
                "Number(document.getElementById('figure-now-requests_per_s').dataset.value || 0) > 0", timeout=WAIT_MS
            )
            page.wait_for_function(
                f"Number(document.querySelector('[data-sparkline=digits]').dataset.points) >= {CHART_POINTS}",
                timeout=WAIT_MS,
            )
            # the hour chart: a minute of load closed (with its p99) and the minute in progress beside it
            page.wait_for_function(
                "document.getElementById('hour-chart').data[0].y.filter((y) => y > 0).length >= 2",
                timeout=HOUR_WAIT_MS,
            )
            shoot(page, "overview")
            page.emulate_media(color_scheme="dark")  # the console follows the browser's scheme
            page.wait_for_timeout(600)  # Plotly's redraw in the dark scheme's colors
            shoot(page, "overview-dark")
            page.emulate_media(color_scheme="light")
            load.finish()
            print(f"  load: {load.ok} requests answered, {load.failed} failed, over {load.elapsed():.0f} s")
            if load.failed:
                sys.exit("some inference requests failed; see the server log")

            add_demo_users(console)
            page.goto(base + "/users/")
            page.wait_for_selector("text=batch-client", timeout=WAIT_MS)
            shoot(page, "users")

            page.goto(base + "/api/docs/")
            page.wait_for_selector(".swagger-ui .opblock", timeout=WAIT_MS)
            zoom(page, 0.7)
            page.wait_for_timeout(300)
            shoot(page, "swagger")
        finally:
            load.finish()
            browser.close()


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    if not CHROMIUM.exists():
        sys.exit(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    IMAGES.mkdir(parents=True, exist_ok=True)
    print("starting the console...")
    with running_console() as console:
        print(f"console ready on {console.base_url}; taking screenshots into {IMAGES.relative_to(REPO_ROOT)}/")
        take_screenshots(console)
    oversized = [path.name for path in IMAGES.glob("*.png") if path.stat().st_size > MAX_PNG_BYTES]
    if oversized:
        sys.exit(f"over {MAX_PNG_BYTES // 1024} KB: {', '.join(oversized)}")


if __name__ == "__main__":
    main()
