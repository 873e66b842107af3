"""The engine's settings, read once from the environment into one frozen object, with the one strict boolean parser.

The console builds its own settings on top of this (console/config.py); the standalone engine reads it alone.
Every reader is strict: a value that does not parse stops start-up with a message naming the variable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


class SettingError(ValueError):
    """An environment variable holds a value the engine cannot use; the message names the variable."""


def parse_bool(name: str, raw: str) -> bool:
    """A strict boolean: 1/0, true/false, yes/no, on/off in any case; anything else names `name` in the error."""
    value = raw.strip().lower()
    if value in TRUE_WORDS:
        return True
    if value in FALSE_WORDS:
        return False
    raise SettingError(f"{name} must be a boolean (true/false, 1/0, yes/no, on/off), got {raw!r}")


def read_text(name: str, environ: Mapping[str, str]) -> str | None:
    """The variable's value, or the content of the file `<name>_FILE` names (Docker and Kubernetes secrets)."""
    file_name = f"{name}_FILE"
    direct, file_path = environ.get(name), environ.get(file_name)
    if direct is not None and file_path is not None:
        raise SettingError(f"{name} and {file_name} are both set; set only one of them")
    if file_path is not None:
        try:
            # one trailing newline is how editors and `echo` save a secret; it is never part of it
            return Path(file_path).read_text(encoding="utf-8").removesuffix("\n").removesuffix("\r")
        except OSError as exc:
            raise SettingError(f"{file_name}: cannot read '{file_path}': {exc.strerror or exc}") from exc
    return direct


def read_bool(name: str, default: bool, environ: Mapping[str, str]) -> bool:
    raw = read_text(name, environ)
    return default if raw is None or not raw.strip() else parse_bool(name, raw)


def read_int(
    name: str, default: int, environ: Mapping[str, str], *, minimum: int = 0, maximum: int | None = None
) -> int:
    raw = read_text(name, environ)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise SettingError(f"{name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise SettingError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise SettingError(f"{name} must be at most {maximum}, got {value}")
    return value


def read_choice(name: str, default: str, choices: tuple[str, ...], environ: Mapping[str, str]) -> str:
    raw = read_text(name, environ)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise SettingError(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return value


@dataclass(frozen=True)
class ConfigLimits:
    """Upper bounds on what a model config may ask of this machine; a config past one is refused at load.

    Triton trusts its repository; Infera takes configs from people over HTTP, so a 200-byte config must not be able
    to ask for a billion warm-up runs, gigabytes of warm-up data or thousands of threads.
    """

    max_instances: int = 64  # instance_group counts summed over the groups (and GPUs)
    max_threads: int = 256  # intra/inter-op thread parameters
    max_warmup_count: int = 1000  # model_warmup count, per sample
    max_warmup_bytes: int = 256 * 1024 * 1024  # one warm-up sample, all inputs together
    max_batch_size: int = 1 << 16
    max_dim: int = 1 << 31  # any dims / reshape entry


@dataclass(frozen=True)
class SandboxSettings:
    """How untrusted versions are trial-loaded: in a child process with no network and these limits."""

    enabled: bool = True
    memory_mb: int = 4096
    cpu_seconds: int = 120
    timeout_seconds: int = 180


@dataclass(frozen=True)
class GrpcSettings:
    """The gRPC front end: its port (0 turns it off), message size, keepalive (Triton's defaults) and compression."""

    port: int = 8001
    # the largest message, after decompression (grpc core stops inflating there); by default /v2's body limit
    max_message_bytes: int = 64 * 1024 * 1024
    keepalive_time_ms: int = 7_200_000
    keepalive_timeout_ms: int = 20_000
    keepalive_permit_without_calls: bool = False
    http2_max_pings_without_data: int = 2
    min_recv_ping_interval_ms: int = 300_000
    max_ping_strikes: int = 2
    response_compression: str = "none"  # none, gzip or deflate
    stream_concurrency: int = 1024  # requests of one ModelStreamInfer stream running at once
    # answers of one ModelStreamInfer stream waiting for its client to read them; past it the stream stops reading
    stream_queue_responses: int = 64
    max_health_watchers: int = 1024  # grpc.health.v1 Watch calls open at once, in all
    max_health_watchers_per_peer: int = 16  # ... and from one client address
    shutdown_grace_seconds: float = 10.0


@dataclass(frozen=True)
class HttpSettings:
    """What the HTTP server (uvicorn or daphne under `serve`) allows a client before it closes the connection.

    A slow client holds a connection, a file descriptor and a little memory: these bound how long. Headers must all
    arrive within `header_timeout_seconds` of the request's first byte (of the connection, for a first request);
    a body may pause at most `body_timeout_seconds`, and must average `body_min_bytes_per_second` past that
    allowance, so a trickle ends as surely as a stall; an idle connection between requests is closed after
    `keepalive_seconds` (longer than a load balancer's own idle timeout, 60 s on most, so the balancer closes it).
    """

    header_timeout_seconds: int = 10
    body_timeout_seconds: int = 30
    keepalive_seconds: int = 75
    body_min_bytes_per_second: int = 1024  # fixed; a legitimate client is thousands of times faster


@dataclass(frozen=True)
class SharedMemoryLimits:
    """Whether clients may register system shared memory, and how much: regions per caller and in all, bytes per
    region and caller.

    Off by default, as in Triton since it added `--allow-client-shm` (`serve --allow-client-shm=true` or
    INFERA_ALLOW_CLIENT_SHM=true turn it on). Nothing is mapped (inputs are copied with pread, outputs written with
    pwrite), so the limits bound descriptors, the registry and the largest copy one request may ask for, not the
    address space.
    """

    allowed: bool = False  # INFERA_ALLOW_CLIENT_SHM: clients may register, unregister and use regions
    max_regions: int = 1024  # INFERA_SHM_MAX_REGIONS: registered regions, all callers together
    max_regions_per_caller: int = 64  # INFERA_SHM_MAX_REGIONS_PER_CALLER: one token, user, or the anonymous callers
    max_region_bytes: int = 4 << 30  # INFERA_SHM_MAX_REGION_MB: one region's byte_size
    max_bytes_per_caller: int = 16 << 30  # INFERA_SHM_MAX_MB_PER_CALLER: the byte_size of a caller's regions summed


def read_shared_memory_limits(env: Mapping[str, str]) -> SharedMemoryLimits:
    return SharedMemoryLimits(
        allowed=read_bool("INFERA_ALLOW_CLIENT_SHM", SharedMemoryLimits.allowed, env),
        max_regions=read_int("INFERA_SHM_MAX_REGIONS", SharedMemoryLimits.max_regions, env, minimum=1),
        max_regions_per_caller=read_int(
            "INFERA_SHM_MAX_REGIONS_PER_CALLER", SharedMemoryLimits.max_regions_per_caller, env, minimum=1
        ),
        max_region_bytes=read_int("INFERA_SHM_MAX_REGION_MB", SharedMemoryLimits.max_region_bytes >> 20, env, minimum=1)
        << 20,
        max_bytes_per_caller=read_int(
            "INFERA_SHM_MAX_MB_PER_CALLER", SharedMemoryLimits.max_bytes_per_caller >> 20, env, minimum=1
        )
        << 20,
    )


@dataclass(frozen=True)
class OpenAILimits:
    """What one /v1 (OpenAI-compatible) request may ask: its body's size and the tokens it may have generated."""

    max_body_bytes: int = 4 * 1024 * 1024  # INFERA_OPENAI_MAX_BODY_BYTES (never above INFERA_MAX_BODY_BYTES)
    max_tokens: int = 32768  # INFERA_OPENAI_MAX_TOKENS: the largest max_tokens, and the cap when none is given


@dataclass(frozen=True)
class TraceLimits:
    """What tracing may hold in memory: tensor data kept per trace, traces waiting for the writer thread."""

    tensor_bytes: int = 64 * 1024  # INFERA_TRACE_TENSOR_BYTES: a trace's tensors (TENSORS level), all together
    queue_traces: int = 256  # INFERA_TRACE_QUEUE: finished traces waiting to be written; past it they are dropped


TRACE_LEVEL_WORDS = {  # Triton's --trace-config level values (any case): off, timestamps (its synonyms), tensors
    "off": "OFF",
    "false": "OFF",
    "timestamps": "TIMESTAMPS",
    "true": "TIMESTAMPS",
    "on": "TIMESTAMPS",
    "min": "TIMESTAMPS",
    "max": "TIMESTAMPS",
    "tensors": "TENSORS",
}
TRACE_CONFIG_KEYS = {  # INFERA_TRACE_CONFIG's settings as Triton spells them -> the variable each stands for
    "level": "INFERA_TRACE_LEVEL",
    "rate": "INFERA_TRACE_RATE",
    "count": "INFERA_TRACE_COUNT",
    "mode": "",
    "triton,file": "INFERA_TRACE_FILE",
    "triton,log-frequency": "INFERA_TRACE_LOG_FREQUENCY",
}


@dataclass(frozen=True)
class TraceStartUp:
    """The global trace settings at start-up (Triton's `--trace-config`): clearing a global setting returns to these.

    Each is an INFERA_TRACE_* variable, or an entry of INFERA_TRACE_CONFIG in Triton's own form, entries separated by
    spaces: `level=TIMESTAMPS rate=1 count=-1 mode=triton triton,file=trace.json triton,log-frequency=50`.
    """

    level: tuple[str, ...] = ("OFF",)  # INFERA_TRACE_LEVEL: OFF, or TIMESTAMPS and/or TENSORS (comma-separated)
    rate: int = 1000  # INFERA_TRACE_RATE: one request in N is traced
    count: int = -1  # INFERA_TRACE_COUNT: traces to take, -1 for no limit
    log_frequency: int = 0  # INFERA_TRACE_LOG_FREQUENCY: a new numbered file every N traces; 0 keeps one file
    file: str = ""  # INFERA_TRACE_FILE: a file in INFERA_TRACE_DIR (as trace_file takes it); none: no trace files

    def as_trace_settings(self) -> dict[str, Any]:
        """In the trace extension's form (engine/monitoring/tracing.py): trace_level a list, the rest strings."""
        return {
            "trace_level": list(self.level),
            "trace_rate": str(self.rate),
            "trace_count": str(self.count),
            "log_frequency": str(self.log_frequency),
            "trace_file": self.file,
        }


def _trace_config_entries(entries: list[str], source: str) -> dict[str, str]:
    """Triton's --trace-config entries as {the variable each stands for: value}, checked as Triton's parser does."""
    found: dict[str, str] = {}
    for entry in entries:
        key, equals, value = entry.partition("=")
        key = key.strip().lower()
        mode, comma, setting = key.rpartition(",")
        if comma and mode not in ("triton", "opentelemetry"):
            raise SettingError(
                f"{source}: invalid value for trace mode option: {mode or '(none)'} in {entry!r}. "
                'Available options are "triton" and "opentelemetry"'
            )
        if mode == "opentelemetry":
            raise SettingError(f"{source}: {entry!r}: this server writes Triton's trace files only")
        if not equals or not setting or not value:
            raise SettingError(
                f"{source}: --trace-config option format is '<trace mode>,<setting>=<value>'. Got {entry}"
            )
        if key not in TRACE_CONFIG_KEYS:
            raise SettingError(
                f"{source}: unknown setting {key!r} in {entry!r} "
                f"(known: {', '.join(k + '=' for k in TRACE_CONFIG_KEYS)})"
            )
        if key == "mode":
            if value.lower() != "triton":
                raise SettingError(f"{source}: mode={value}: this server writes Triton's trace files only")
            continue
        variable = TRACE_CONFIG_KEYS[key]
        if variable == "INFERA_TRACE_LEVEL" and variable in found:  # Triton: each level= adds a level
            value = f"{found[variable]},{value}"
        elif variable in found:
            raise SettingError(f"{source}: {key}= is given twice")
        found[variable] = value
    return found


def _trace_levels(name: str, raw: str) -> tuple[str, ...]:
    """Levels as Triton reads --trace-config level=: an OFF anywhere turns tracing off."""
    words = [word.strip().lower() for word in raw.split(",") if word.strip()]
    unknown = [word for word in words if word not in TRACE_LEVEL_WORDS]
    if unknown or not words:
        raise SettingError(f"{name}: invalid value for trace level option: {raw!r} (OFF, TIMESTAMPS or TENSORS)")
    levels = {TRACE_LEVEL_WORDS[word] for word in words}
    if "OFF" in levels:
        return ("OFF",)
    return tuple(level for level in ("TIMESTAMPS", "TENSORS") if level in levels)


def read_trace_start_up(env: Mapping[str, str], trace_config: list[str] | None = None) -> TraceStartUp:
    """The start-up trace settings from INFERA_TRACE_* and INFERA_TRACE_CONFIG, or `trace_config` (`serve
    --trace-config` entries) in its place; a setting given two ways is an error, not a silent choice. The trace file
    is checked against the trace folder by the Tracer, which knows it (the console decides its default later)."""
    source = "--trace-config" if trace_config is not None else "INFERA_TRACE_CONFIG"
    if trace_config is None:
        trace_config = (read_text("INFERA_TRACE_CONFIG", env) or "").replace(";", " ").split()
    from_config = _trace_config_entries(trace_config, source)
    values: dict[str, str] = {}
    for name in ("INFERA_TRACE_LEVEL", "INFERA_TRACE_RATE", "INFERA_TRACE_COUNT", "INFERA_TRACE_LOG_FREQUENCY"):
        direct = read_text(name, env)
        if direct is not None and direct.strip() and name in from_config:
            raise SettingError(f"{name} and {source} both set the trace {name[13:].lower()}; set one")
        if name in from_config or (direct is not None and direct.strip()):
            values[name] = from_config.get(name) or str(direct)
    file = read_text("INFERA_TRACE_FILE", env)
    if file and "INFERA_TRACE_FILE" in from_config:
        raise SettingError(f"INFERA_TRACE_FILE and {source}'s triton,file= are both set; set one")
    file = (from_config.get("INFERA_TRACE_FILE") or file or "").strip()
    numbers = {name: _int_value(name, value) for name, value in values.items() if name != "INFERA_TRACE_LEVEL"}
    start_up = TraceStartUp(
        level=_trace_levels("INFERA_TRACE_LEVEL", values["INFERA_TRACE_LEVEL"])
        if "INFERA_TRACE_LEVEL" in values
        else TraceStartUp.level,
        rate=numbers.get("INFERA_TRACE_RATE", TraceStartUp.rate),
        count=numbers.get("INFERA_TRACE_COUNT", TraceStartUp.count),
        log_frequency=numbers.get("INFERA_TRACE_LOG_FREQUENCY", TraceStartUp.log_frequency),
        file=file,
    )
    for name, value, minimum, maximum in (
        ("INFERA_TRACE_RATE", start_up.rate, 1, 2**32 - 1),
        ("INFERA_TRACE_COUNT", start_up.count, -1, 2**31 - 1),
        ("INFERA_TRACE_LOG_FREQUENCY", start_up.log_frequency, 0, 2**32 - 1),
    ):
        if not minimum <= value <= maximum:
            raise SettingError(f"{name} must be between {minimum} and {maximum}, got {value}")
    return start_up


def _int_value(name: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise SettingError(f"{name} must be a whole number, got {raw!r}") from None


def read_openai_limits(env: Mapping[str, str]) -> OpenAILimits:
    return OpenAILimits(
        max_body_bytes=read_int("INFERA_OPENAI_MAX_BODY_BYTES", OpenAILimits.max_body_bytes, env, minimum=1024),
        max_tokens=read_int("INFERA_OPENAI_MAX_TOKENS", OpenAILimits.max_tokens, env, minimum=1, maximum=2**31 - 1),
    )


def read_trace_limits(env: Mapping[str, str]) -> TraceLimits:
    return TraceLimits(
        tensor_bytes=read_int("INFERA_TRACE_TENSOR_BYTES", TraceLimits.tensor_bytes, env),
        queue_traces=read_int("INFERA_TRACE_QUEUE", TraceLimits.queue_traces, env, minimum=1),
    )


# Triton's restricted categories (--http-restricted-api, --grpc-restricted-protocol); the endpoints and calls of
# each are engine/frontend/header_rules.py's one map
RESTRICTED_CATEGORIES = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)
GRPC_RESTRICTED_HEADER_PREFIX = "triton-grpc-protocol-"  # Triton's: a gRPC restriction's key names this metadata
_HEADER_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")


@dataclass(frozen=True)
class Restriction:
    """One group of Triton's restricted-API setting: requests of these categories need `header: value`."""

    categories: frozenset[str]
    header: str  # lowercase, as servers hand header and metadata names on
    value: str


@dataclass(frozen=True)
class HeaderRules:
    """What one front end asks of a request's headers (Triton's restricted APIs) and passes on from them to the
    model (Triton's header forwarding: names matching the pattern become request parameters)."""

    restrictions: tuple[Restriction, ...] = ()
    forward_pattern: str = ""  # a regular expression, case-insensitive unless it starts with (?-i); "": none


def _restrictions(entries: list[str], source: str, flag: str, kind: str, prefix: str) -> tuple[Restriction, ...]:
    """Triton's `<categories>:<key>=<value>` groups, checked as its parser checks them (one group per category)."""
    groups: list[Restriction] = []
    seen: set[str] = set()
    for entry in entries:
        names, colon, setting = entry.partition(":")
        key, equals, value = setting.partition("=")
        if not colon or not equals or not names or not key or not value:
            raise SettingError(
                f"--{flag} option format is '<config name>:<setting>=<value>'. Got {entry} (in {source})"
            )
        categories = frozenset(name.strip().lower() for name in names.split(","))
        for category in sorted(categories):
            if category not in RESTRICTED_CATEGORIES:
                raise SettingError(
                    f"unknown restricted {kind} '{category}' in {source} (known: {', '.join(RESTRICTED_CATEGORIES)})"
                )
            if category in seen:
                raise SettingError(
                    f"restricted {kind} '{category}' can not be specified in multiple config groups ({source})"
                )
        seen |= categories
        header = prefix + key.strip().lower()
        if not set(header) <= _HEADER_NAME_CHARS or header.endswith("-bin") or header.startswith("grpc-"):
            raise SettingError(f"{source}: header '{key}' must be letters, digits, '-', '_' or '.' (not -bin, grpc-)")
        if header == "authorization":
            raise SettingError(f"{source}: the header 'authorization' carries API tokens; restrict with another one")
        if not value.isascii() or not value.isprintable() or value != value.strip() or " " in value:
            raise SettingError(f"{source}: the value for '{header}' must be printable ASCII without spaces")
        groups.append(Restriction(categories, header, value))
    return tuple(groups)


def compile_forward_pattern(pattern: str) -> re.Pattern[str]:
    """A header forward pattern as Triton reads it: case-insensitive (header names are), unless it starts with
    `(?-i)`; it matches anywhere in a name (use ^...$ for whole names)."""
    if pattern.startswith("(?-i)"):
        return re.compile(pattern.removeprefix("(?-i)"))
    return re.compile(pattern, re.IGNORECASE)


def _forward_pattern(name: str, pattern: str) -> str:
    try:
        compile_forward_pattern(pattern)
    except re.error as exc:
        raise SettingError(f"{name} is not a valid regular expression: {exc} in {pattern!r}") from None
    return pattern


def read_header_rules(
    env: Mapping[str, str], protocol: str, restricted: list[str] | None = None, forward_pattern: str | None = None
) -> HeaderRules:
    """HTTP's (INFERA_HTTP_RESTRICTED_API, INFERA_HTTP_HEADER_FORWARD_PATTERN) or gRPC's
    (INFERA_GRPC_RESTRICTED_PROTOCOL, INFERA_GRPC_HEADER_FORWARD_PATTERN) header rules; `restricted` and
    `forward_pattern` are `serve`'s flags, in place of the variables (both set is an error, not a choice)."""
    grpc = protocol == "grpc"
    flag = "grpc-restricted-protocol" if grpc else "http-restricted-api"
    variable = f"INFERA_{flag.upper().replace('-', '_')}"
    direct = (read_text(variable, env) or "").replace(";", " ").split()
    if direct and restricted is not None:
        raise SettingError(f"{variable} and --{flag} are both set; set one")
    source = f"--{flag}" if restricted is not None else variable
    kind = "protocol" if grpc else "api"
    prefix = GRPC_RESTRICTED_HEADER_PREFIX if grpc else ""
    groups = _restrictions(restricted if restricted is not None else direct, source, flag, kind, prefix)
    pattern_variable = f"INFERA_{protocol.upper()}_HEADER_FORWARD_PATTERN"
    pattern = read_text(pattern_variable, env) or ""
    if pattern and forward_pattern is not None:
        raise SettingError(f"{pattern_variable} and --{protocol}-header-forward-pattern are both set; set one")
    if forward_pattern is not None:
        pattern, pattern_variable = forward_pattern, f"--{protocol}-header-forward-pattern"
    return HeaderRules(groups, _forward_pattern(pattern_variable, pattern) if pattern else "")


@dataclass(frozen=True)
class SequenceLimits:
    """How many sequences of one model version may wait for a slot, and how many one caller may have open."""

    max_backlog: int = 256  # INFERA_SEQUENCE_MAX_BACKLOG: sequences waiting for a slot (or an instance); past it 503
    # INFERA_SEQUENCE_MAX_PER_CALLER: sequences one token, user or anonymous address has open (slots and backlog
    # together) on one model version; past it 429. 0: no limit
    max_per_caller: int = 128


@dataclass(frozen=True)
class EngineSettings:
    """Everything the engine reads from the environment, read once."""

    server_name: str = "infera"  # what GET /v2 and ServerMetadata answer as `name` (INFERA_SERVER_NAME)
    allow_code: bool = True  # INFERA_ALLOW_PYTHON_MODELS: may any load run code (model.py, .pt2) at all
    open_repository_control: bool = False  # anonymous callers may load and unload through /v2, models without code
    # INFERA_OPEN_REPOSITORY_CONTROL_ALLOWS_CODE: ...and models that run code (python, .pt2) too, as Triton's own
    # test suites expect; anyone who reaches /v2 then runs code in the server
    open_repository_control_allows_code: bool = False
    disable_nvml: bool = False
    max_body_bytes: int = 64 * 1024 * 1024  # Triton's default for --http-max-input-size
    max_concurrent_per_caller: int = 256  # requests one token (or user, or anonymous address) has in flight; 0: any
    trace_dir: Path | None = None  # where trace files may be written (INFERA_TRACE_DIR); None: no trace files
    trace: TraceLimits = field(default_factory=TraceLimits)
    trace_start_up: TraceStartUp = field(default_factory=TraceStartUp)  # INFERA_TRACE_CONFIG, INFERA_TRACE_LEVEL...
    openai: OpenAILimits = field(default_factory=OpenAILimits)
    limits: ConfigLimits = field(default_factory=ConfigLimits)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    grpc: GrpcSettings = field(default_factory=GrpcSettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    shared_memory: SharedMemoryLimits = field(default_factory=SharedMemoryLimits)
    # after SIGTERM: how long in-flight requests may take to finish, and then models to unload (Kubernetes gives 30 s)
    shutdown_grace_seconds: int = 25
    sequences: SequenceLimits = field(default_factory=SequenceLimits)
    http_headers: HeaderRules = field(default_factory=HeaderRules)  # INFERA_HTTP_RESTRICTED_API, ..._FORWARD_PATTERN
    grpc_headers: HeaderRules = field(default_factory=HeaderRules)  # INFERA_GRPC_RESTRICTED_PROTOCOL, ...

    @property
    def anonymous_may_load_code(self) -> bool:
        """Whether a caller without credentials may load models that run code: only with both opt-ins."""
        return self.open_repository_control and self.open_repository_control_allows_code


def read_engine_settings(environ: Mapping[str, str] | None = None) -> EngineSettings:
    """EngineSettings from INFERA_* variables (defaults for those unset); SettingError names a bad one."""
    env = os.environ if environ is None else environ
    limits = ConfigLimits(
        max_instances=read_int("INFERA_MAX_INSTANCES", ConfigLimits.max_instances, env, minimum=1),
        max_threads=read_int("INFERA_MAX_THREADS", ConfigLimits.max_threads, env, minimum=1),
        max_warmup_count=read_int("INFERA_MAX_WARMUP_COUNT", ConfigLimits.max_warmup_count, env, minimum=1),
        max_warmup_bytes=read_int("INFERA_MAX_WARMUP_MB", ConfigLimits.max_warmup_bytes >> 20, env, minimum=1) << 20,
    )
    sandbox = SandboxSettings(
        enabled=read_bool("INFERA_SANDBOX_TRIAL_LOADS", True, env),
        memory_mb=read_int("INFERA_SANDBOX_MEMORY_MB", SandboxSettings.memory_mb, env, minimum=256),
        cpu_seconds=read_int("INFERA_SANDBOX_CPU_SECONDS", SandboxSettings.cpu_seconds, env, minimum=1),
        timeout_seconds=read_int("INFERA_SANDBOX_TIMEOUT_SECONDS", SandboxSettings.timeout_seconds, env, minimum=1),
    )
    max_body_bytes = read_int("INFERA_MAX_BODY_BYTES", EngineSettings.max_body_bytes, env, minimum=1024)
    grpc_message_mb = read_int("INFERA_GRPC_MAX_MESSAGE_MB", 0, env, maximum=2047)
    grpc = GrpcSettings(
        port=read_int("INFERA_GRPC_PORT", GrpcSettings.port, env, maximum=65535),
        # unset (or 0): as large as a /v2 body may be
        max_message_bytes=grpc_message_mb << 20 if grpc_message_mb else max_body_bytes,
        keepalive_time_ms=read_int("INFERA_GRPC_KEEPALIVE_TIME_MS", GrpcSettings.keepalive_time_ms, env, minimum=1),
        keepalive_timeout_ms=read_int(
            "INFERA_GRPC_KEEPALIVE_TIMEOUT_MS", GrpcSettings.keepalive_timeout_ms, env, minimum=1
        ),
        keepalive_permit_without_calls=read_bool("INFERA_GRPC_KEEPALIVE_PERMIT_WITHOUT_CALLS", False, env),
        http2_max_pings_without_data=read_int(
            "INFERA_GRPC_HTTP2_MAX_PINGS_WITHOUT_DATA", GrpcSettings.http2_max_pings_without_data, env
        ),
        min_recv_ping_interval_ms=read_int(
            "INFERA_GRPC_HTTP2_MIN_RECV_PING_INTERVAL_MS", GrpcSettings.min_recv_ping_interval_ms, env
        ),
        max_ping_strikes=read_int("INFERA_GRPC_HTTP2_MAX_PING_STRIKES", GrpcSettings.max_ping_strikes, env),
        response_compression=read_choice("INFERA_GRPC_RESPONSE_COMPRESSION", "none", ("none", "gzip", "deflate"), env),
        stream_queue_responses=read_int(
            "INFERA_GRPC_STREAM_QUEUE_RESPONSES", GrpcSettings.stream_queue_responses, env, minimum=1
        ),
        max_health_watchers=read_int("INFERA_GRPC_MAX_HEALTH_WATCHERS", GrpcSettings.max_health_watchers, env),
        max_health_watchers_per_peer=read_int(
            "INFERA_GRPC_MAX_HEALTH_WATCHERS_PER_PEER", GrpcSettings.max_health_watchers_per_peer, env
        ),
    )
    http = HttpSettings(
        header_timeout_seconds=read_int(
            "INFERA_HTTP_HEADER_TIMEOUT_SECONDS", HttpSettings.header_timeout_seconds, env, minimum=1, maximum=3600
        ),
        body_timeout_seconds=read_int(
            "INFERA_HTTP_BODY_TIMEOUT_SECONDS", HttpSettings.body_timeout_seconds, env, minimum=1, maximum=3600
        ),
        keepalive_seconds=read_int(
            "INFERA_HTTP_KEEPALIVE_SECONDS", HttpSettings.keepalive_seconds, env, minimum=1, maximum=3600
        ),
    )
    name = (read_text("INFERA_SERVER_NAME", env) or "infera").strip()
    if not name or len(name) > 128 or any(ord(ch) < 32 for ch in name):
        raise SettingError(f"INFERA_SERVER_NAME must be 1 to 128 printable characters, got {name!r}")
    open_control = read_bool("INFERA_OPEN_REPOSITORY_CONTROL", False, env)
    open_code = read_bool("INFERA_OPEN_REPOSITORY_CONTROL_ALLOWS_CODE", False, env)
    if open_code and not open_control:
        raise SettingError(
            "INFERA_OPEN_REPOSITORY_CONTROL_ALLOWS_CODE=true needs INFERA_OPEN_REPOSITORY_CONTROL=true: it widens "
            "open repository control to models that run code"
        )
    return EngineSettings(
        server_name=name,
        trace_dir=Path(trace_dir) if (trace_dir := read_text("INFERA_TRACE_DIR", env)) else None,
        trace=read_trace_limits(env),
        trace_start_up=read_trace_start_up(env),
        openai=read_openai_limits(env),
        allow_code=read_bool("INFERA_ALLOW_PYTHON_MODELS", True, env),
        open_repository_control=open_control,
        open_repository_control_allows_code=open_code,
        disable_nvml=read_bool("INFERA_DISABLE_NVML", False, env),
        max_body_bytes=max_body_bytes,
        max_concurrent_per_caller=read_int(
            "INFERA_MAX_CONCURRENT_PER_CALLER", EngineSettings.max_concurrent_per_caller, env
        ),
        limits=limits,
        sandbox=sandbox,
        grpc=grpc,
        http=http,
        shared_memory=read_shared_memory_limits(env),
        shutdown_grace_seconds=read_int(
            "INFERA_SHUTDOWN_GRACE_SECONDS", EngineSettings.shutdown_grace_seconds, env, maximum=3600
        ),
        sequences=SequenceLimits(
            max_backlog=read_int(
                "INFERA_SEQUENCE_MAX_BACKLOG", SequenceLimits.max_backlog, env, minimum=0, maximum=1_000_000
            ),
            max_per_caller=read_int("INFERA_SEQUENCE_MAX_PER_CALLER", SequenceLimits.max_per_caller, env),
        ),
        http_headers=read_header_rules(env, "http"),
        grpc_headers=read_header_rules(env, "grpc"),
    )
