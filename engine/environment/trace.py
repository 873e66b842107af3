"""Trace settings from the environment: what tracing may hold in memory, and Triton's --trace-config at start-up."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.environment.values import SettingError, int_value, read_int, read_text


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
    numbers = {name: int_value(name, value) for name, value in values.items() if name != "INFERA_TRACE_LEVEL"}
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


def read_trace_limits(env: Mapping[str, str]) -> TraceLimits:
    return TraceLimits(
        tensor_bytes=read_int("INFERA_TRACE_TENSOR_BYTES", TraceLimits.tensor_bytes, env),
        queue_traces=read_int("INFERA_TRACE_QUEUE", TraceLimits.queue_traces, env, minimum=1),
    )
