"""Triton's trace extension: sampled requests' timestamps, written as Triton's trace JSON to the trace file.

Settings are global, or per model (a model's own settings override the global ones key by key, as Triton's do):
`trace_level` (OFF, or TIMESTAMPS and/or TENSORS: each traced request's input and output tensors), `trace_rate` (one
request in N is traced), `trace_count` (how many more traces, -1 for no limit), `log_frequency` (write a numbered
file every N traces; 0 keeps one file, rewritten after each trace) and `trace_file`, which must lie in the server's
trace folder (INFERA_TRACE_DIR): a caller may name a file there, never write elsewhere on the server. A traced
request collects REQUEST_START, QUEUE_START, COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END and
REQUEST_END, in nanoseconds of the monotonic clock, from the front end and the dispatcher.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.datatypes import wire_type_of
from engine.errors import InvalidArgument, Unsupported

LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
DEFAULTS: dict[str, Any] = {
    "trace_level": ["OFF"],
    "trace_rate": "1000",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_file": "",
    "trace_mode": "triton",
}


@dataclass
class Trace:
    """What one traced request recorded: its timestamps, and (level TENSORS) its input and output tensors."""

    id: int
    model: str
    version: int
    timestamps: list[tuple[str, int]] = field(default_factory=list)
    tensors: list[dict[str, Any]] = field(default_factory=list)
    with_timestamps: bool = True
    with_tensors: bool = False

    def mark(self, name: str, ns: int | None = None) -> None:
        if self.with_timestamps:
            self.timestamps.append((name, time.monotonic_ns() if ns is None else ns))

    def record_tensors(self, activity: str, tensors: dict[str, np.ndarray]) -> None:
        """Keep tensors as Triton's TENSORS level writes them: values and shape as comma-separated text."""
        if not self.with_tensors:
            return
        for name, array in tensors.items():
            values = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in array.reshape(-1).tolist()]
            self.tensors.append(
                {
                    "activity": activity,
                    "tensor": {
                        "name": name,
                        "data": ",".join(str(v) for v in values),
                        "shape": ",".join(str(d) for d in array.shape),
                        "dtype": wire_type_of(array),
                    },
                }
            )

    def to_json(self) -> list[dict[str, Any]]:
        """Triton's records of a trace: which model, the timestamps, then one record per tensor."""
        records: list[dict[str, Any]] = [{"id": self.id, "model_name": self.model, "model_version": self.version}]
        if self.with_timestamps:
            records.append({"id": self.id, "timestamps": [{"name": name, "ns": ns} for name, ns in self.timestamps]})
        records += [{"id": self.id, **entry} for entry in self.tensors]
        return records


@dataclass
class _Settings:
    values: dict[str, Any]
    seen: int = 0  # requests considered, for the rate
    remaining: int = -1  # traces left, from trace_count


class Tracer:
    """Decides which requests are traced and writes their traces; one per server, safe from worker threads."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else None
        self._global = _Settings(dict(DEFAULTS))
        self._models: dict[str, _Settings] = {}
        self._ids = itertools.count(1)
        self._pending: dict[str, list[Trace]] = {}  # trace file -> traces not yet in a numbered file
        self._written: dict[str, list[Trace]] = {}  # trace file -> every trace (log_frequency 0)
        self._file_index: dict[str, int] = {}
        self._lock = threading.Lock()
        self._any_level = False  # whether any settings (global or a model's) name a level other than OFF

    # ---- settings

    def settings(self, model: str | None = None) -> dict[str, Any]:
        with self._lock:
            merged = dict(self._global.values)
            if model and model in self._models:
                merged.update(self._models[model].values)
            return merged

    def update(self, changes: dict[str, Any], model: str | None = None) -> dict[str, Any]:
        """Check every change, then apply them; a value of None clears a model's own setting."""
        checked = {key: _checked(key, value, self.directory) for key, value in changes.items()}
        with self._lock:
            target = self._global if not model else self._models.setdefault(model, _Settings({}))
            for key, value in checked.items():
                if value is None:
                    target.values.pop(key, None) if model else target.values.__setitem__(key, DEFAULTS[key])
                else:
                    target.values[key] = value
            if "trace_count" in checked or "trace_level" in checked:
                count = target.values.get("trace_count", self._global.values["trace_count"])
                target.remaining = int(count)
            every = [self._global, *self._models.values()]
            self._any_level = any(s.values.get("trace_level", ["OFF"]) != ["OFF"] for s in every)
        return self.settings(model)

    # ---- tracing

    def start(self, model: str, version: int) -> Trace | None:
        """A Trace when this request is to be traced, else None (the common, cheap case: no lock, no merge)."""
        if not self._any_level:
            return None
        with self._lock:
            own = self._models.get(model)
            values = dict(self._global.values, **(own.values if own else {}))
            if values["trace_level"] == ["OFF"] or not values["trace_file"]:
                return None
            state = own if own is not None and own.values else self._global
            state.seen += 1
            if (state.seen - 1) % int(values["trace_rate"]):
                return None
            if state.remaining == 0:
                return None
            if state.remaining > 0:
                state.remaining -= 1
            levels = values["trace_level"]
            return Trace(
                next(self._ids),
                model,
                version,
                with_timestamps="TIMESTAMPS" in levels,
                with_tensors="TENSORS" in levels,
            )

    def finish(self, trace: Trace) -> None:
        """Record a finished trace and write the trace file as its settings ask."""
        values = self.settings(trace.model)
        path = values["trace_file"]
        frequency = int(values["log_frequency"])
        with self._lock:
            if frequency <= 0:
                everything = self._written.setdefault(path, [])
                everything.append(trace)
                _write(Path(path), everything)
                return
            pending = self._pending.setdefault(path, [])
            pending.append(trace)
            if len(pending) >= frequency:
                index = self._file_index.get(path, 0)
                self._file_index[path] = index + 1
                _write(Path(f"{path}.{index}"), pending)
                self._pending[path] = []


def _write(path: Path, traces: list[Trace]) -> None:
    records = [record for trace in traces for record in trace.to_json()]
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(records))
    temporary.replace(path)


def _checked(key: str, value: Any, directory: Path | None) -> Any:
    """A setting's value in Triton's form (trace_level a list, the rest strings), or InvalidArgument/Unsupported."""
    if key not in DEFAULTS:
        raise InvalidArgument(f"unknown trace setting '{key}' (known: {', '.join(DEFAULTS)})")
    if value is None:
        return None
    if key == "trace_level":
        levels = [str(level).upper() for level in (value if isinstance(value, list) else [value])]
        unknown = [level for level in levels if level not in LEVELS]
        if unknown or not levels:
            raise InvalidArgument(f"trace_level must be a list of {', '.join(LEVELS)}, got {value!r}")
        chosen = [level for level in ("TIMESTAMPS", "TENSORS") if level in levels]
        return chosen or ["OFF"]
    if isinstance(value, list):
        if len(value) != 1:
            raise InvalidArgument(f"trace setting '{key}' takes one value, got {value!r}")
        value = value[0]
    text = str(value)
    if key in ("trace_rate", "trace_count", "log_frequency"):
        try:
            number = int(text)
        except ValueError:
            raise InvalidArgument(f"trace setting '{key}' must be an integer, got {value!r}") from None
        minimum = {"trace_rate": 1, "trace_count": -1, "log_frequency": 0}[key]
        if number < minimum:
            raise InvalidArgument(f"trace setting '{key}' must be at least {minimum}, got {number}")
        return str(number)
    if key == "trace_mode" and text not in ("triton",):
        raise Unsupported(f"trace_mode '{text}' is not supported: this server writes Triton's trace files only")
    if key == "trace_file" and text:
        return str(_trace_path(text, directory))
    return text


def _trace_path(text: str, directory: Path | None) -> Path:
    """Where a trace_file setting writes: inside the trace folder, or refused."""
    if directory is None:
        raise Unsupported("this server has no trace folder (INFERA_TRACE_DIR), so it writes no trace files")
    root = directory.resolve()
    path = Path(text) if Path(text).is_absolute() else root / text
    resolved = path.resolve()
    if not resolved.is_relative_to(root) or resolved == root:
        raise InvalidArgument(f"trace_file '{text}' must be a file in the trace folder {root} (INFERA_TRACE_DIR)")
    resolved.parent.mkdir(parents=True, exist_ok=True)
    return resolved
