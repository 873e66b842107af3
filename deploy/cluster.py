"""`LocalCluster`: N `manage.py serve` replicas on loopback behind HAProxy, on one PostgreSQL database, one Redis
and one model store, as an API for `python -m deploy.local`, the tests and the bench.

Each replica is what a Kubernetes pod runs: the same `serve` process with its own INFERA_REPLICA_NAME, HTTP and
gRPC ports and var/ folder; the database, Redis, the model store and the secret key are shared. HAProxy (Debian's
`haproxy`, deploy/haproxy.py) balances one port round robin over the replicas whose /v2/health/ready answers 200.
Start and stop, each replica's URL, kill, stop or restart one replica; the children are deploy/processes.py's.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from deploy.haproxy import Backend, server_states, set_in_rotation, write_config
from deploy.processes import (
    ROOT,
    ClusterError,
    RedisServer,
    end_process,
    free_port,
    http_status,
    private_file,
    spawn,
    tail,
)

DEFAULT_POSTGRES = "postgres://postgres@127.0.0.1:5432"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
DEFAULT_DATABASE = "infera_local"
START_TIMEOUT_S = 300.0  # three replicas importing torch and loading models on two busy cores
STOP_TIMEOUT_S = 60.0
# what the cluster sets for each replica: the same variables (or their _FILE forms) from the caller's shell go
SET_BY_CLUSTER = (
    "DATABASE_URL",
    "REDIS_URL",
    "INFERA_VAR_DIR",
    "INFERA_MODEL_STORE",
    "INFERA_REPLICA_NAME",
    "INFERA_SECRET_KEY",
    "INFERA_ADMIN_PASSWORD",
    "INFERA_GRPC_PORT",
    "INFERA_SEED_DEMO",
    "INFERA_TRUSTED_PROXIES",
    "HOST",
    "PORT",
    "DJANGO_SETTINGS_MODULE",
)
_databases = itertools.count(1)


@dataclass
class Replica:
    """One `manage.py serve` of the cluster: its name, ports, var/ folder and (while it runs) its process."""

    name: str
    port: int
    grpc_port: int
    var_dir: Path
    host: str = "127.0.0.1"
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def grpc_address(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def log_path(self) -> Path:
        return self.var_dir / "serve.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""


class LocalCluster:
    """N replicas behind HAProxy on loopback, sharing one PostgreSQL database, Redis, model store and secret key.

    `database=None` makes a database of its own (dropped at stop); `redis_url=None` starts a redis-server of its
    own. A database made now starts with an empty model store, since the two describe the same models.
    """

    def __init__(
        self,
        replicas: int = 3,
        *,
        workdir: Path,
        postgres: str = DEFAULT_POSTGRES,
        database: str | None = DEFAULT_DATABASE,
        redis_url: str | None = DEFAULT_REDIS,
        host: str = "127.0.0.1",
        port: int = 0,
        fresh: bool = False,
        seed_demo: bool = False,
        access_log: bool = False,
        admin_password: str | None = None,
        env: dict[str, str] | None = None,
        start_timeout: float = START_TIMEOUT_S,
    ) -> None:
        if replicas < 1:
            raise ValueError(f"a cluster needs at least one replica, got {replicas}")
        self.workdir = Path(workdir).resolve()
        self.postgres = postgres.rstrip("/")
        self.own_database = database is None
        self.database = database or f"infera_cluster_{os.getpid()}_{next(_databases)}"
        self.redis = RedisServer(self.workdir / "redis") if redis_url is None else None
        self._redis_url = redis_url
        self.host = host
        self.port = port or free_port(host)
        self.fresh = fresh or self.own_database
        self.seed_demo = seed_demo
        self.access_log = access_log
        self._admin_password = admin_password
        self.extra_env = dict(env or {})
        self.start_timeout = start_timeout
        self.replicas = [
            Replica(f"replica-{n}", free_port(host), free_port(host), self.workdir / f"replica-{n}", host)
            for n in range(1, replicas + 1)
        ]
        self.balancer: subprocess.Popen | None = None
        self.database_created = False

    # ---- addresses

    @property
    def url(self) -> str:
        """The balancer: where clients of the cluster connect."""
        return f"http://{self.host}:{self.port}"

    @property
    def urls(self) -> list[str]:
        return [replica.url for replica in self.replicas]

    @property
    def database_url(self) -> str:
        return f"{self.postgres}/{self.database}"

    @property
    def redis_url(self) -> str:
        return self.redis.url if self.redis is not None else str(self._redis_url)

    @property
    def store(self) -> Path:
        return self.workdir / "models"

    @property
    def admin_password_file(self) -> Path:
        return self.workdir / "admin_password"

    @property
    def admin_password(self) -> str:
        return self.admin_password_file.read_text(encoding="utf-8").strip()

    @property
    def stats_socket(self) -> Path:
        return self.workdir / "haproxy.sock"

    def replica(self, which: int | str) -> Replica:
        """A replica by index (0-based) or by name."""
        if isinstance(which, int):
            return self.replicas[which]
        return next(r for r in self.replicas if r.name == which)

    # ---- starting and stopping

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalCluster:
        """Start everything (replicas at the same moment, then HAProxy) and wait until the balancer has them all."""
        haproxy = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
        if haproxy is None:
            raise ClusterError("haproxy is missing: apt-get install haproxy (Debian's package)")
        try:
            self._prepare()
            for replica in self.replicas:
                self.start_replica(replica.name, wait=False)
            for replica in self.replicas:
                self.wait_ready(replica.name)
            config = write_config(
                self.workdir / "haproxy.cfg",
                host=self.host,
                port=self.port,
                backends=[Backend(r.name, r.host, r.port) for r in self.replicas],
                stats_socket=self.stats_socket,
            )
            self.stats_socket.unlink(missing_ok=True)
            self.balancer = spawn([haproxy, "-db", "-f", str(config)], env=None, log_path=self.workdir / "haproxy.log")
            for replica in self.replicas:
                self.wait_in_balancer(replica.name, up=True)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop HAProxy, then every replica at once (each drains), then the cluster's own Redis and database."""
        if self.balancer is not None:
            end_process(self.balancer, signal.SIGUSR1, 10)  # SIGUSR1: HAProxy's soft stop
            self.balancer = None
        running = [r for r in self.replicas if r.running]
        for replica in running:
            with contextlib.suppress(ProcessLookupError):
                replica.process.send_signal(signal.SIGTERM)
        for replica in running:
            end_process(replica.process, None, STOP_TIMEOUT_S)  # a second SIGTERM would cut the drain short
        if self.redis is not None:
            self.redis.stop()
        if self.own_database:
            with contextlib.suppress(Exception), self._admin_connection() as connection:
                connection.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')

    def _prepare(self) -> None:
        """The working folder, the shared secret key and admin password, Redis, and the database."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        private_file(self.workdir / "secret_key", lambda: secrets.token_urlsafe(50))
        if self._admin_password is not None:
            self.admin_password_file.unlink(missing_ok=True)
        private_file(self.admin_password_file, lambda: self._admin_password or secrets.token_urlsafe(12))
        if self.redis is not None:
            self.redis.start()
        with self._admin_connection() as connection:
            if self.fresh:
                connection.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            exists = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)).fetchone()
            if not exists:
                connection.execute(f'CREATE DATABASE "{self.database}"')
                self.database_created = True
        if self.database_created:  # a new database knows no models: the store starts empty with it
            shutil.rmtree(self.store, ignore_errors=True)
        self.store.mkdir(parents=True, exist_ok=True)

    def _admin_connection(self):
        import psycopg

        parts = urllib.parse.urlsplit(self.postgres)
        try:
            return psycopg.connect(
                host=parts.hostname or "127.0.0.1",
                port=parts.port or 5432,
                user=urllib.parse.unquote(parts.username or "postgres"),
                password=urllib.parse.unquote(parts.password) if parts.password else None,
                dbname="postgres",
                autocommit=True,
                connect_timeout=5,
            )
        except psycopg.OperationalError as exc:
            raise ClusterError(f"PostgreSQL does not answer at {parts.hostname}:{parts.port or 5432}: {exc}") from None

    # ---- one replica

    def environment(self, replica: Replica) -> dict[str, str]:
        """What `replica`'s process runs with: the caller's environment, the cluster's shared parts, its own."""
        names = set(SET_BY_CLUSTER) | {f"{name}_FILE" for name in SET_BY_CLUSTER}
        env = {key: value for key, value in os.environ.items() if key not in names}
        env |= {
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "INFERA_VAR_DIR": str(replica.var_dir),
            "INFERA_MODEL_STORE": str(self.store),
            "INFERA_REPLICA_NAME": replica.name,
            "INFERA_SECRET_KEY_FILE": str(self.workdir / "secret_key"),
            "INFERA_ADMIN_PASSWORD_FILE": str(self.admin_password_file),
            "INFERA_SEED_DEMO": "true" if self.seed_demo else "false",
            "INFERA_TRUSTED_PROXIES": "127.0.0.1",  # HAProxy, which says whom it forwards for
            "PYTHONUNBUFFERED": "1",
        }
        return env | self.extra_env

    def command(self, replica: Replica) -> list[str]:
        command = [sys.executable, "manage.py", "serve", "--host", replica.host, "--port", str(replica.port)]
        command += ["--grpc-port", str(replica.grpc_port)]
        return command + ([] if self.access_log else ["--no-access-log"])

    def start_replica(self, which: int | str, *, wait: bool = True) -> Replica:
        """Start a replica that is not running (on its own ports again); with `wait`, until it is ready."""
        replica = self.replica(which)
        if replica.running:
            raise ClusterError(f"{replica.name} is running already")
        replica.var_dir.mkdir(parents=True, exist_ok=True)
        replica.process = spawn(self.command(replica), env=self.environment(replica), log_path=replica.log_path)
        if wait:
            self.wait_ready(replica.name)
        return replica

    def stop_replica(self, which: int | str, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """Stop a replica gracefully (SIGTERM: it drains its requests first); its exit status."""
        replica = self.replica(which)
        end_process(replica.process, signal.SIGTERM, timeout)
        return replica.process.returncode if replica.process is not None else None

    def kill(self, which: int | str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to a replica (SIGKILL by default: no drain, no clean-up) and wait for it to end."""
        replica = self.replica(which)
        if replica.running:
            replica.process.send_signal(sig)
            replica.process.wait(timeout=STOP_TIMEOUT_S)

    def restart(self, which: int | str) -> Replica:
        """Stop a replica gracefully, start it again and wait until it is ready."""
        self.stop_replica(which)
        return self.start_replica(which)

    def wait_ready(self, which: int | str, timeout: float | None = None) -> None:
        """Until the replica's /v2/health/ready answers 200; ClusterError with its log if it exits or never does."""
        replica = self.replica(which)
        deadline = time.monotonic() + (self.start_timeout if timeout is None else timeout)
        while http_status(replica.url + "/v2/health/ready") != 200:
            if not replica.running:
                raise ClusterError(f"{replica.name} exited while starting:\n{replica.log()[-4000:]}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{replica.name} was not ready in time:\n{replica.log()[-4000:]}")
            time.sleep(0.2)

    def balancer_states(self) -> dict[str, str]:
        """Each replica's state in HAProxy (UP, DOWN, ...), by name."""
        return server_states(self.stats_socket)

    def balance_over(self, count: int) -> None:
        """Send the balancer's traffic to the first `count` replicas only (the others in maintenance), and wait."""
        for index, replica in enumerate(self.replicas):
            set_in_rotation(self.stats_socket, replica.name, index < count)
        for index, replica in enumerate(self.replicas):
            self.wait_in_balancer(replica.name, up=index < count)

    def wait_in_balancer(self, which: int | str, *, up: bool, timeout: float = 30.0) -> None:
        """Until HAProxy's health checks have taken the replica in (`up`) or out of the rotation."""
        name = self.replica(which).name
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError):
                if (self.balancer_states().get(name) == "UP") == up:
                    return
            if self.balancer is None or self.balancer.poll() is not None:
                raise ClusterError(f"HAProxy is not running:\n{tail(self.workdir / 'haproxy.log')}")
            if time.monotonic() > deadline:
                raise ClusterError(f"HAProxy did not mark {name} {'UP' if up else 'DOWN'} in {timeout:.0f} s")
            time.sleep(0.1)

    def manage(self, *arguments: str, replica: int | str = 0) -> str:
        """Run `manage.py <arguments>` with a replica's settings (issue a token, make a user); its output."""
        done = subprocess.run(
            [sys.executable, "manage.py", *arguments],
            cwd=ROOT,
            env=self.environment(self.replica(replica)),
            check=True,
            capture_output=True,
            text=True,
        )
        return done.stdout.strip()
