"""How the bench starts Infera: the full console process when the tree has it, else the engine-only app.

`LAUNCH_MODE` (or `--infera-launch`) picks one; `auto` takes the console process once `manage.py serve` exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.servers import PYTHON, ROOT, NotAvailable, ServerSpec, server_command

STANDALONE_APP = "engine.frontend.standalone:app"
STANDALONE_PROTOCOL = "engine.frontend.standalone:DirectProtocol"
LAUNCH_MODES = ("auto", "console", "standalone")
ADMIN_USERNAME = "admin"
ADMIN_PASSWORD = "bench-admin-password"


def standalone_missing() -> str | None:
    """Why the engine-only ASGI app cannot run here, or None when it can."""
    if not (ROOT / "engine" / "frontend" / "standalone.py").exists():
        return "engine/frontend/standalone.py is not in the tree yet"
    return None


def console_missing() -> str | None:
    """Why `manage.py serve` cannot run here, or None when it can."""
    if not (ROOT / "manage.py").exists():
        return "manage.py is not in the tree yet"
    if not list(ROOT.glob("console/**/management/commands/serve.py")):
        return "the `serve` management command is not in the tree yet"
    return None


def resolve_mode(mode: str) -> str:
    """The launch mode to use: `auto` takes the console when it exists, else the standalone app."""
    if mode not in LAUNCH_MODES:
        raise ValueError(f"unknown launch mode '{mode}' ({', '.join(LAUNCH_MODES)})")
    if mode == "auto":
        return "console" if console_missing() is None else "standalone"
    return mode


@dataclass
class ConsoleHome:
    """A throw-away home for one console process: its model store (a copy of the bench repository) and DB."""

    workdir: Path

    @property
    def store(self) -> Path:
        return self.workdir / "store"

    @property
    def env(self) -> dict[str, str]:
        return {
            "INFERA_MODEL_STORE": str(self.store),
            "INFERA_VAR_DIR": str(self.workdir),
            "DATABASE_URL": f"sqlite:///{self.workdir / 'bench.sqlite3'}",
            "INFERA_SECRET_KEY": "bench-only-secret-key-not-for-production-use-0123456789",
            "INFERA_ADMIN_PASSWORD": ADMIN_PASSWORD,
            "INFERA_DEBUG": "false",
            "INFERA_LOG_LEVEL": "WARNING",
            "INFERA_INFERENCE_AUTH": "none",
            # the bench's one admin polls the management API every 20 ms while a change takes effect (traffic,
            # hot swap, cluster): past the default 600/min those polls were refused with 429 and a section lost
            "INFERA_API_RATE": "100000/min",
        }

    def fill_store(self, repository: Path) -> None:
        """Hard-link the bench repository into the store, so the console may write there and the source stays."""
        if self.store.exists():
            shutil.rmtree(self.store)
        self.workdir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(repository, self.store, copy_function=_link_model_files)

    def prepare(self, repository: Path) -> None:
        """Fill the store, create the database, and register the store's models (the desired state)."""
        self.fill_store(repository)
        self.manage(["migrate", "--noinput"])
        self.manage(["import_repository", str(self.store)])

    def manage(self, args: list[str], timeout: float = 300) -> str:
        """Run one manage.py command against this home; NotAvailable with its output when it fails."""
        done = subprocess.run(
            [PYTHON, "manage.py", *args],
            cwd=ROOT,
            env=os.environ | self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise NotAvailable(f"manage.py {args[0]} failed: {(done.stderr or done.stdout).strip()[-600:]}")
        return done.stdout

    def api_token(self) -> str:
        """A management API token of the admin (`manage.py issue_token`, the key alone on the last line)."""
        return self.manage(["issue_token", ADMIN_USERNAME]).strip().splitlines()[-1].strip()

    def session_cookie(self) -> str:
        """A signed-in session id of the admin, for the WebSocket clients."""
        code = (
            "from django.contrib.auth import get_user_model; from django.test import Client; c = Client(); "
            f"c.force_login(get_user_model().objects.get(username='{ADMIN_USERNAME}')); "
            "print(c.cookies['sessionid'].value)"
        )
        return self.manage(["shell", "-c", code]).strip().splitlines()[-1].strip()


def _link_model_files(source: str, target: str) -> None:
    # model files are large and read-only here; configs are copied since the console rewrites them on activation
    if source.endswith(".pbtxt"):
        shutil.copy2(source, target)
    else:
        os.link(source, target)


def infera_spec(
    server: str,
    port: int,
    repository: Path,
    workdir: Path,
    mode: str = "auto",
    grpc_port: int = 0,
    *,
    access_log: bool = False,
) -> ServerSpec:
    """The ServerSpec of Infera under `server` (uvicorn or daphne); NotAvailable when the tree lacks it.

    `access_log`: a line per request, as `make serve` writes them (the default profile); the tuned one turns it off.
    """
    mode = resolve_mode(mode)
    if mode == "console":
        missing = console_missing()
        if missing:
            raise NotAvailable(missing)
        home = ConsoleHome(workdir)
        home.prepare(repository)
        command = [PYTHON, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port), "--server", server]
        command += ["--no-seed", "--grpc-port", str(grpc_port)]  # 0: off, nothing to collide on
        if not access_log:
            command.append("--no-access-log")
        return ServerSpec(f"infera-{server}", command, port, env=home.env)
    missing = standalone_missing()
    if missing:
        raise NotAvailable(missing)
    env = {"INFERA_MODEL_REPOSITORY": str(repository)}
    command = server_command(server, STANDALONE_APP, port)
    if server == "uvicorn":  # the last --http counts: /v2 inference answered past ASGI, as the console serves it
        command += ["--http", STANDALONE_PROTOCOL]
    return ServerSpec(f"infera-{server}", command, port, env=env)
