"""Infera's settings: one frozen object read from the environment once, through the strict readers of console/env.py.

`console/settings.py` builds `INFERA = read_settings()` and derives Django's own settings from it; every other use
site reads `settings.INFERA.<field>` with no default of its own. The engine's part (`engine`) is read by the engine's
own reader (engine.settings), so both halves agree on every shared variable. A wrong value stops start-up with a
message naming the variable.
"""

from __future__ import annotations

import dataclasses
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console.env import EnvError, env_bool, env_choice, env_int, env_list, env_path, env_str, env_url
from console.forwarded import trusted_networks
from engine.api import EngineSettings, SettingError, read_engine_settings

# what INFERA_DEMO_MODELS and `serve --demo-models` may name; `digits_pipeline` brings its steps (digits too)
DEMO_MODELS = (
    "simple",
    "simple_string",
    "simple_sequence",
    "simple_dyna_sequence",
    "simple_sequence_onnx",
    "digits",
    "digits_pipeline",
    "text_generator",
    "smollm2",
    "all-minilm-l6-v2",
)


def demo_models(names: list[str], source: str) -> tuple[str, ...]:
    """The demo models `names` chooses, checked against DEMO_MODELS (ValueError names `source` and the unknown one)."""
    names = [name.strip() for name in names]
    unknown = [name for name in names if name not in DEMO_MODELS]
    if unknown:
        raise ValueError(f"{source}: no demo model {unknown[0]!r}; choose among {', '.join(DEMO_MODELS)}")
    return tuple(name for name in DEMO_MODELS if name in names)


BASE_DIR = Path(__file__).resolve().parent.parent
DATABASE_SCHEMES = ("sqlite", "postgres", "postgresql", "pgsql")
REDIS_SCHEMES = ("redis", "rediss", "unix")
INFERENCE_AUTH_CHOICES = ("token", "none", "auto")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
ACCESS_LOG_FORMATS = ("text", "json")
MAX_ACCESS_LOG_SAMPLE = 1_000_000
DEFAULT_API_RATE = "600/min"
MAX_WORKERS = 64
REPLICA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


@dataclass(frozen=True)
class InferaSettings:
    """Every INFERA_* value (and DATABASE_URL, REDIS_URL), parsed and checked."""

    var_dir: Path
    model_store: Path
    debug: bool = False
    secret_key: str | None = None  # None: kept in var_dir/secret_key
    allowed_hosts: tuple[str, ...] = ("localhost", "127.0.0.1", "[::1]")
    csrf_trusted_origins: tuple[str, ...] = ()
    database_url: str | None = None
    redis_url: str | None = None
    max_upload_mb: int = 512
    max_unpacked_mb: int = 2048
    max_archive_members: int = 10_000
    reconcile_seconds: int = 10
    token_check_seconds: int = 5
    token_grace_seconds: int = 900
    log_level: str = "INFO"
    access_log_format: str = "text"  # text: the server's own access lines; json: one JSON object a line
    access_log_sample: int = 1  # one access line in N, with the count it stands for (1: every request)
    log_queue: int = 200_000  # log lines waiting for the writer thread; past it they are dropped and counted
    inference_auth: str = "auto"
    login_max_failures: int = 5
    login_window_seconds: int = 300
    api_rate: str = DEFAULT_API_RATE
    secure_cookies: bool | None = None  # None: Secure unless debug
    replica_name: str = "infera"
    migrate: bool = True  # False: another process (a Kubernetes Job) applies migrations; serve waits for them
    seed_demo: bool = True  # False: serve writes no demo models (a cluster's replicas, production)
    demo_models: tuple[str, ...] = DEMO_MODELS  # which of them seeding writes
    trusted_proxies: tuple[str, ...] = ()  # peers whose X-Forwarded-For / -Proto are believed (console/forwarded.py)
    workers: int = 1  # serving processes on the port (serve --workers); more than 1 shares the cache on disk
    listen_address: str = ""  # host:port `serve` listens on (set by serve, shown among the replicas)
    engine: EngineSettings = field(default_factory=EngineSettings)

    @property
    def max_upload_bytes(self) -> int:
        return self.max_upload_mb * 1024 * 1024

    @property
    def allow_python_models(self) -> bool:
        """INFERA_ALLOW_PYTHON_MODELS: whether any model that runs code may load (decided by the engine)."""
        return self.engine.allow_code

    @property
    def open_repository_control(self) -> bool:
        return self.engine.open_repository_control

    @property
    def open_repository_control_allows_code(self) -> bool:
        """INFERA_OPEN_REPOSITORY_CONTROL_ALLOWS_CODE (with open control): callers without a token may load code."""
        return self.engine.anonymous_may_load_code

    @property
    def cookies_secure(self) -> bool:
        return (not self.debug) if self.secure_cookies is None else self.secure_cookies

    def replace(self, **changes: Any) -> InferaSettings:
        """A copy with `changes`; `allow_python_models` and the engine's own field names change the engine part."""
        engine_fields = {f.name for f in dataclasses.fields(EngineSettings)}
        engine_changes = {k: changes.pop(k) for k in list(changes) if k in engine_fields}
        if "allow_python_models" in changes:
            engine_changes["allow_code"] = changes.pop("allow_python_models")
        engine = dataclasses.replace(self.engine, **engine_changes) if engine_changes else self.engine
        return dataclasses.replace(self, engine=engine, **changes)


def read_settings(environ: Mapping[str, str] | None = None) -> InferaSettings:
    """InferaSettings from the environment (os.environ by default); EnvError names a wrong variable."""
    env = environ
    var_dir = env_path("INFERA_VAR_DIR", BASE_DIR / "var", base=BASE_DIR, environ=env)
    max_upload_mb = env_int("INFERA_MAX_UPLOAD_MB", 512, minimum=1, maximum=1024 * 1024, environ=env)
    secure_cookies = env_str("INFERA_SECURE_COOKIES", environ=env)
    debug = env_bool("INFERA_DEBUG", False, environ=env)
    try:
        engine = read_engine_settings(env)
    except SettingError as exc:
        raise EnvError(str(exc)) from None
    if engine.trace_dir is None:  # trace files live under var/ unless INFERA_TRACE_DIR says where
        engine = dataclasses.replace(engine, trace_dir=var_dir / "traces")
    secret_key = env_str("INFERA_SECRET_KEY", environ=env)
    redis_url = env_url("REDIS_URL", REDIS_SCHEMES, environ=env)
    if redis_url is not None and not secret_key:
        # replicas sharing Redis answer the same users: a key each would end every session at the next replica
        raise EnvError(
            "INFERA_SECRET_KEY (or INFERA_SECRET_KEY_FILE) must be set when REDIS_URL is: every replica signs "
            "sessions with it, so all of them need the same one"
        )
    return InferaSettings(
        var_dir=var_dir,
        model_store=env_path("INFERA_MODEL_STORE", var_dir / "models", base=BASE_DIR, environ=env),
        debug=debug,
        secret_key=secret_key,
        allowed_hosts=tuple(env_list("INFERA_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"], environ=env)),
        csrf_trusted_origins=tuple(env_list("INFERA_CSRF_TRUSTED_ORIGINS", [], environ=env)),
        database_url=env_url("DATABASE_URL", DATABASE_SCHEMES, environ=env),
        redis_url=redis_url,
        max_upload_mb=max_upload_mb,
        # an archive may unpack to this much, in this many members (zip bombs and member floods stop here)
        max_unpacked_mb=env_int("INFERA_MAX_UNPACKED_MB", 4 * max_upload_mb, minimum=1, environ=env),
        max_archive_members=env_int("INFERA_MAX_ARCHIVE_MEMBERS", 10_000, minimum=1, environ=env),
        # how soon a replica that missed a change message converges anyway
        reconcile_seconds=env_int("INFERA_RECONCILE_SECONDS", 10, minimum=1, maximum=3600, environ=env),
        # how long a /v2 token's verdict is reused before the database is asked again (revocations reach it at once)
        token_check_seconds=env_int("INFERA_TOKEN_CHECK_SECONDS", 5, minimum=0, maximum=3600, environ=env),
        # how long a token checked before a database outage keeps working through it
        token_grace_seconds=env_int("INFERA_TOKEN_GRACE_SECONDS", 900, minimum=0, maximum=86400, environ=env),
        log_level=env_choice("INFERA_LOG_LEVEL", "INFO", LOG_LEVELS, environ=env),
        access_log_format=env_choice("INFERA_ACCESS_LOG_FORMAT", "text", ACCESS_LOG_FORMATS, environ=env),
        access_log_sample=env_int("INFERA_ACCESS_LOG_SAMPLE", 1, minimum=1, maximum=MAX_ACCESS_LOG_SAMPLE, environ=env),
        # written off the event loop (console/hosting/log_writer.py); only a stream that stops taking lines fills it
        log_queue=env_int("INFERA_LOG_QUEUE", 200_000, minimum=1000, maximum=10_000_000, environ=env),
        inference_auth=env_choice("INFERA_INFERENCE_AUTH", "auto", INFERENCE_AUTH_CHOICES, environ=env),
        login_max_failures=env_int("INFERA_LOGIN_MAX_FAILURES", 5, minimum=1, environ=env),
        login_window_seconds=env_int("INFERA_LOGIN_WINDOW_SECONDS", 300, minimum=1, environ=env),
        api_rate=api_rate(env_str("INFERA_API_RATE", environ=env)),
        secure_cookies=None if secure_cookies is None else env_bool("INFERA_SECURE_COOKIES", not debug, environ=env),
        replica_name=replica_name(env_str("INFERA_REPLICA_NAME", environ=env)),
        migrate=env_bool("INFERA_MIGRATE", True, environ=env),
        seed_demo=env_bool("INFERA_SEED_DEMO", True, environ=env),
        demo_models=chosen_demo_models(env_list("INFERA_DEMO_MODELS", list(DEMO_MODELS), environ=env)),
        trusted_proxies=trusted_proxies(env_list("INFERA_TRUSTED_PROXIES", [], environ=env)),
        workers=env_int("INFERA_WORKERS", 1, minimum=1, maximum=MAX_WORKERS, environ=env),
        engine=engine,
    )


def chosen_demo_models(names: list[str]) -> tuple[str, ...]:
    """INFERA_DEMO_MODELS checked: the demo models seeding writes, by name (default: all of them)."""
    try:
        return demo_models(names, "INFERA_DEMO_MODELS")
    except ValueError as exc:
        raise EnvError(str(exc)) from None


def trusted_proxies(items: list[str]) -> tuple[str, ...]:
    """INFERA_TRUSTED_PROXIES checked: addresses or CIDR networks of the load balancers in front."""
    try:
        return tuple(str(network) for network in trusted_networks(items))
    except ValueError as exc:
        raise EnvError(f"INFERA_TRUSTED_PROXIES: {exc}") from None


def replica_name(raw: str | None) -> str:
    """INFERA_REPLICA_NAME checked: this serving process's name among replicas (default: the host name, which is
    the pod's name on Kubernetes)."""
    name = socket.gethostname() if raw is None or not raw.strip() else raw.strip()
    if not REPLICA_NAME.fullmatch(name):
        if raw is None or not raw.strip():  # a host name we cannot use as is: keep its usable part
            return re.sub(r"[^A-Za-z0-9._-]", "-", name)[:63].strip("-.") or "infera"
        raise EnvError(
            "INFERA_REPLICA_NAME must be 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit, "
            f"got {raw!r}"
        )
    return name


def api_rate(raw: str | None) -> str:
    """INFERA_API_RATE checked: requests per second, minute, hour or day, like `600/min`."""
    if raw is None or not raw.strip():
        return DEFAULT_API_RATE
    rate = raw.strip().lower()
    if not re.fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", rate):
        raise EnvError(
            f"INFERA_API_RATE must be a number of requests per s, min, hour or day like 600/min, got {raw!r}"
        )
    return rate
