"""The engine's settings, read once from the environment into one frozen object.

The console builds its own settings on top of this (console/config.py); the standalone engine reads it alone.
Every reader is strict (engine/environment/values.py): a value that does not parse stops start-up with a message
naming the variable. Trace, header and model control settings are read by engine/environment/trace.py, headers.py
and model_control.py.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from engine.environment.headers import HeaderRules, read_header_rules
from engine.environment.model_control import ModelControl, read_model_control
from engine.environment.trace import TraceLimits, TraceStartUp, read_trace_limits, read_trace_start_up
from engine.environment.values import SettingError, read_bool, read_choice, read_int, read_text


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
    # the processes of `serve --workers` share the port (SO_REUSEPORT); otherwise a port another process listens on
    # is refused at start, as Triton's bind fails, rather than shared with it
    port_shared: bool = False


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


def read_openai_limits(env: Mapping[str, str]) -> OpenAILimits:
    return OpenAILimits(
        max_body_bytes=read_int("INFERA_OPENAI_MAX_BODY_BYTES", OpenAILimits.max_body_bytes, env, minimum=1024),
        max_tokens=read_int("INFERA_OPENAI_MAX_TOKENS", OpenAILimits.max_tokens, env, minimum=1, maximum=2**31 - 1),
    )


@dataclass(frozen=True)
class SequenceLimits:
    """How many sequences of one model version may wait for a slot, and how many one caller may have open."""

    max_backlog: int = 256  # INFERA_SEQUENCE_MAX_BACKLOG: sequences waiting for a slot (or an instance); past it 503
    # INFERA_SEQUENCE_MAX_PER_CALLER: sequences one token, user or anonymous address has open (slots and backlog
    # together) on one model version; past it 429. 0: no limit
    max_per_caller: int = 128


@dataclass(frozen=True)
class MemoryBudgetSettings:
    """How much memory loaded models may hold (engine.serving.memory_budget); None: no bound.

    `gpu_bytes` bounds each GPU alike; `gpu_fraction` (0-1] is the share of each GPU's total memory instead.
    """

    host_bytes: int | None = None  # INFERA_MEMORY_BUDGET_MB
    gpu_bytes: int | None = None  # INFERA_GPU_MEMORY_BUDGET given in bytes
    gpu_fraction: float | None = None  # INFERA_GPU_MEMORY_BUDGET given as a fraction
    cold_start_timeout_seconds: float = 60.0  # an on-demand model's first request waits this long, then 503


def read_memory_budget(env: Mapping[str, str]) -> MemoryBudgetSettings:
    """INFERA_MEMORY_BUDGET_MB, INFERA_GPU_MEMORY_BUDGET (bytes, or a fraction up to 1) and
    INFERA_COLD_START_TIMEOUT_SECONDS."""
    host_mb = read_int("INFERA_MEMORY_BUDGET_MB", 0, env)
    gpu_bytes, gpu_fraction = None, None
    raw = (read_text("INFERA_GPU_MEMORY_BUDGET", env) or "").strip()
    if raw:
        try:
            value = float(raw)
        except ValueError:
            raise SettingError(
                f"INFERA_GPU_MEMORY_BUDGET must be bytes or a fraction of each GPU, got {raw!r}"
            ) from None
        if value <= 0:
            raise SettingError(f"INFERA_GPU_MEMORY_BUDGET must be over 0, got {raw!r}")
        if value <= 1:
            gpu_fraction = value
        else:
            gpu_bytes = int(value)
    timeout = read_int("INFERA_COLD_START_TIMEOUT_SECONDS", 60, env, minimum=1, maximum=3600)
    return MemoryBudgetSettings(host_mb << 20 if host_mb else None, gpu_bytes, gpu_fraction, float(timeout))


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
    model_control: ModelControl = field(default_factory=ModelControl)  # INFERA_MODEL_CONTROL_MODE, ...
    memory: MemoryBudgetSettings = field(default_factory=MemoryBudgetSettings)  # INFERA_MEMORY_BUDGET_MB, ...

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
        port_shared=read_int("INFERA_WORKERS", 1, env, minimum=1) > 1,  # set for each worker by serve --workers
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
        model_control=read_model_control(env),
        memory=read_memory_budget(env),
    )
