"""Shared fixtures: a real `manage.py serve` process on a free port, and headless Chromium through Playwright."""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from console.config import DEMO_MODELS
from tests.browser import CHROMIUM, CHROMIUM_ARGS

# torch's OpenMP threads spin while they wait for work: with the suite's own torch models, the servers it starts and
# Chromium sharing two cores, spinning threads take the cores the others need (a tiny MLP's training: 43 s spinning,
# 1 s passive, on a loaded machine). Set before anything imports torch; the servers the tests start inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
REPO_ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO_ROOT / "test-artifacts"
ADMIN_PASSWORD = "infera-test-admin-password"
SERVER_START_TIMEOUT_S = 180  # migrate + torch import + training the digits demo on two busy cores
# what a seeded test server seeds unless its test asks for more: the demo LLM and sentence encoder took every model
# READY from 96 s to 178 s on two busy cores, and only the tests that use them start a server with them
TEST_DEMO_MODELS = ",".join(name for name in DEMO_MODELS if name not in ("smollm2", "all-minilm-l6-v2"))


@dataclass
class ServerProcess:
    """A running `manage.py serve`: where it answers, who can sign in, and what it has printed so far."""

    base_url: str
    var_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes]
    grpc_port: int = 0
    admin_username: str = "admin"
    admin_password: str = ADMIN_PASSWORD

    @property
    def grpc_address(self) -> str:
        """`host:port` of its gRPC front end."""
        return f"127.0.0.1:{self.grpc_port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
        """(status, body) of a GET; HTTP errors are answers too, not exceptions."""
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def wait_for(self, path: str, status: int = 200, timeout: float = 60.0) -> int:
        """Poll `path` until it answers `status`; the last status seen is returned either way."""
        deadline = time.monotonic() + timeout
        seen = -1
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the server exited with {self.process.returncode}:\n{self.log()[-4000:]}")
            try:
                seen, _ = self.get(path, timeout=5)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                seen = -1
            if seen == status:
                return seen
            time.sleep(0.25)
        return seen


def sign_in(page: object, server: ServerProcess) -> None:
    """Sign the browser page in as the server's admin through the sign-in form, as a person would."""
    page.goto(server.base_url + "/accounts/login/")  # type: ignore[attr-defined]
    page.fill("input[name=username]", server.admin_username)  # type: ignore[attr-defined]
    page.fill("input[name=password]", server.admin_password)  # type: ignore[attr-defined]
    page.click("button[type=submit]")  # type: ignore[attr-defined]
    page.wait_for_url(server.base_url + "/")  # type: ignore[attr-defined]


@pytest.fixture
def in_memory_layer(settings) -> None:
    """This process's channel layer, in memory (whatever REDIS_URL the suite runs with)."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serve_process(var_dir: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    """Run `manage.py serve` with its own var/ until the block ends; fail with its log if it never answers.

    It seeds TEST_DEMO_MODELS unless `env` names INFERA_DEMO_MODELS (or `args` say --no-seed or --demo-models)."""
    var_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    grpc_port = free_port() if "--grpc-port" not in args else 0
    grpc_args = ["--grpc-port", str(grpc_port)] if grpc_port else []
    child_env = {
        key: value
        for key, value in os.environ.items()
        # the server under test gets the embedded defaults, not the database or Redis the suite may point at
        if key not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "HOST", "PORT"}
    }
    child_env |= {
        "INFERA_VAR_DIR": str(var_dir),
        "INFERA_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "INFERA_DEMO_MODELS": TEST_DEMO_MODELS,
        "PYTHONUNBUFFERED": "1",
    }
    child_env |= env or {}
    log_path = var_dir / f"serve-{port}.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(port), *grpc_args, *args],
            cwd=REPO_ROOT,
            env=child_env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    server = ServerProcess(f"http://127.0.0.1:{port}", var_dir, log_path, process, grpc_port)
    try:
        if server.wait_for("/accounts/login/", timeout=SERVER_START_TIMEOUT_S) != 200:
            pytest.fail(f"the server did not answer /accounts/login/ in time:\n{server.log()[-4000:]}")
        yield server
    finally:
        stop_process(process)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C the server (a graceful shutdown, as a person would stop it), then kill it if it lingers."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def manage_command(var_dir: Path, env: dict[str, str]) -> Callable[..., str]:
    """Run `manage.py <command>` from the shell against a server's var/ and settings; returns its last output line."""
    shell_env = {**os.environ, **env, "INFERA_VAR_DIR": str(var_dir)}

    def manage(*command: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=REPO_ROOT,
            env=shell_env,
            check=True,
            capture_output=True,
            text=True,
        )
        return done.stdout.strip().splitlines()[-1]

    return manage


def api_call(server: ServerProcess, path: str, key: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    """(status, lower-cased headers, body) of a REST API call with an API token; HTTP errors are answers too."""
    request = urllib.request.Request(server.base_url + path, method=method, headers={"Authorization": f"Token {key}"})
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def signed_in_opener(server: ServerProcess) -> urllib.request.OpenerDirector:
    """A cookie-keeping opener signed in as the admin through the sign-in form."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    form = opener.open(server.base_url + "/accounts/login/", timeout=15).read().decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    body = urllib.parse.urlencode(
        {"username": server.admin_username, "password": server.admin_password, "csrfmiddlewaretoken": csrf}
    ).encode()
    request = urllib.request.Request(
        server.base_url + "/accounts/login/", data=body, headers={"Referer": server.base_url + "/accounts/login/"}
    )
    opener.open(request, timeout=15)
    return opener


@pytest.fixture(scope="session")
def infera_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real `manage.py serve` (uvicorn) for the session, with a fresh var/ (database, secret, TEST_DEMO_MODELS)."""
    with serve_process(tmp_path_factory.mktemp("serve") / "var") as server:
        yield server


@pytest.fixture(scope="session")
def infera_full_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real `manage.py serve` for the session seeded as a person's first start is: every demo model, the LLM
    and the sentence encoder among them. A module whose tests need it names it as its `infera_server`."""
    env = {"INFERA_DEMO_MODELS": ",".join(DEMO_MODELS)}
    with serve_process(tmp_path_factory.mktemp("serve-full") / "var", env=env) as server:
        yield server


@pytest.fixture
def worker_commands(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The command lines `serve --workers` starts its workers with, recorded instead of run (the port taken free)."""
    from types import SimpleNamespace

    from console.hosting import workers

    commands: list[list[str]] = []
    monkeypatch.setattr(workers, "check_port_free", lambda host, port: None)
    monkeypatch.setattr(
        workers,
        "WorkerSupervisor",
        lambda command, count, replica: SimpleNamespace(run=lambda: commands.append(command) or 0),
    )
    return commands


def engine_front_end_missing() -> str | None:
    """Why /v2 cannot answer yet in this build, or None once the engine and its v2 front end are in."""
    for path in ("engine/serving/server.py", "engine/frontend"):
        if not (REPO_ROOT / path).exists():
            return f"{path} has not landed yet"
    return None


@pytest.fixture
def chromium_browser() -> Iterator[object]:
    """Debian's Chromium driven by Playwright (no browser download); each launch gets a fresh profile folder.

    Function-scoped on purpose: while Playwright's sync API runs, its event loop is the thread's running loop,
    and every async test after it would fail with "Runner.run() cannot be called from a running event loop".
    """
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium); .ci/run does"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # Playwright gives every launch a new, empty --user-data-dir of its own
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium_browser: object, request: pytest.FixtureRequest) -> Iterator[object]:
    """A page in a fresh browser context; its last state is saved as test-artifacts/<test>.png.

    Playwright's string predicates (`wait_for_function`) are evaluated in the page, which the console's
    Content-Security-Policy forbids; tests/console/test_browser_csp.py checks the pages under the policy itself.
    """
    context = chromium_browser.new_context(  # type: ignore[attr-defined]
        viewport={"width": 1200, "height": 800}, bypass_csp=True
    )
    browser_page = context.new_page()
    try:
        yield browser_page
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        name = re.sub(r"[^\w.-]+", "_", request.node.nodeid.split("::", 1)[-1])
        try:
            browser_page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
        finally:
            context.close()
