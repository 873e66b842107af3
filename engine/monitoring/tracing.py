"""Triton's trace extension: sampled requests' timestamps, written as Triton's trace JSON to the trace file.

Settings are global, or per model (a model's own settings override the global ones key by key, as Triton's do);
the global ones start as EngineSettings.trace_start_up (INFERA_TRACE_CONFIG, Triton's `--trace-config`), a global
setting cleared (sent as null) returns to its start-up value, a model's cleared setting to the global one:
`trace_level` (OFF, or TIMESTAMPS and/or TENSORS: each traced request's input and output tensors), `trace_rate` (the
Nth request of every N is traced, as Triton counts), `trace_count` (how many more traces, -1 for no limit; it reads
back as what is left, and setting or clearing it starts over), `log_frequency` (start a new numbered
file every N traces; 0 keeps one file, but traces under a trace_count go to a numbered file that ends with the last
of them, as Triton writes them) and `trace_file`, a name in the server's trace folder (INFERA_TRACE_DIR): a
caller may name a file there, never write elsewhere on the server; it reads back as it was set. A trace file set at
start-up (Triton's `--trace-config triton,file=`) is fixed, as Triton's: changing it over the network is refused.
A traced request collects REQUEST_START, QUEUE_START, COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START,
COMPUTE_END and REQUEST_END, in nanoseconds of the monotonic clock, from the front end and the dispatcher.

What tracing holds is bounded: a trace keeps at most INFERA_TRACE_TENSOR_BYTES of tensor data (the first elements of
each tensor, marked `truncated`); a finished trace goes to one writer thread through a queue of INFERA_TRACE_QUEUE
traces, and when that queue is full the trace is dropped and counted (`Tracer.dropped`) rather than the loop waiting
on a disk; nothing is kept once written. A trace file is one JSON array, as Triton writes it, appended to (its closing
"]" overwritten by ",records]"), never rewritten, so it is valid JSON after every write; files are created 0600: they
hold other callers' tensors.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import queue
import stat
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from engine.config.datatypes import wire_type_of
from engine.environment.trace import TraceLimits
from engine.environment.values import SettingError
from engine.errors import InferaError, InvalidArgument, Unsupported

log = logging.getLogger("infera.engine")

LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
DEFAULTS: dict[str, Any] = {
    "trace_level": ["OFF"],
    "trace_rate": "1000",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_file": "",
    "trace_mode": "triton",
}
# Triton's types: rate and log_frequency uint32, count int32
NUMBER_RANGES = {"trace_rate": (1, 2**32 - 1), "trace_count": (-1, 2**31 - 1), "log_frequency": (0, 2**32 - 1)}
FILE_FIXED = "trace file location can not be updated through network protocol"  # Triton's words (http_server.cc)
MAX_TRACE_FILE_CHARS = 255  # one file name's worth (NAME_MAX), subfolders included
WRITER_IDLE_SECONDS = 5.0  # the writer thread ends after this long with nothing to write; the next trace starts one
WRITER_BATCH = 64  # traces the writer takes from its queue for one round of writes


@dataclass
class TensorRecord:
    """One tensor of a trace: its first elements (a copy, at most the trace's budget), formatted only when written."""

    activity: str
    name: str
    shape: tuple[int, ...]
    dtype: str
    kept: np.ndarray
    truncated: bool

    def to_json(self) -> dict[str, Any]:
        values = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in self.kept.tolist()]
        tensor = {
            "name": self.name,
            "data": ",".join(str(v) for v in values),
            "shape": ",".join(str(d) for d in self.shape),
            "dtype": self.dtype,
        }
        if self.truncated:
            tensor["truncated"] = True
        return {"activity": self.activity, "tensor": tensor}


@dataclass
class Trace:
    """What one traced request recorded: its timestamps, and (level TENSORS) its input and output tensors."""

    id: int
    model: str
    version: int
    timestamps: list[tuple[str, int]] = field(default_factory=list)
    tensors: list[TensorRecord] = field(default_factory=list)
    with_timestamps: bool = True
    with_tensors: bool = False
    file: str = ""  # the trace_file setting in force when the trace began, and its log_frequency
    frequency: int = 0
    counted: bool = False  # taken under a trace_count (not -1): it goes to a numbered file, as Triton's
    last: bool = False  # the last trace that count allowed: its numbered file ends with it
    tensor_budget: int = TraceLimits.tensor_bytes  # tensor bytes this trace may still keep

    def mark(self, name: str, ns: int | None = None) -> None:
        if self.with_timestamps:
            self.timestamps.append((name, time.monotonic_ns() if ns is None else ns))

    def record_tensors(self, activity: str, tensors: dict[str, np.ndarray]) -> None:
        """Keep tensors as Triton's TENSORS level writes them, each cut to what the trace's budget still allows."""
        if not self.with_tensors:
            return
        for name, array in tensors.items():
            kept, used = _first_elements(array, self.tensor_budget)
            self.tensor_budget -= used
            self.tensors.append(
                TensorRecord(activity, name, tuple(array.shape), wire_type_of(array), kept, kept.size < array.size)
            )

    def to_json(self) -> list[dict[str, Any]]:
        """Triton's records of a trace: which model, the timestamps, then one record per tensor."""
        records: list[dict[str, Any]] = [{"id": self.id, "model_name": self.model, "model_version": self.version}]
        if self.with_timestamps:
            records.append({"id": self.id, "timestamps": [{"name": name, "ns": ns} for name, ns in self.timestamps]})
        records += [{"id": self.id, **tensor.to_json()} for tensor in self.tensors]
        return records


@dataclass
class _Settings:
    values: dict[str, Any]
    seen: int = 0  # requests considered since these settings last changed, for the rate
    remaining: int = -1  # traces left, from trace_count


class Tracer:
    """Decides which requests are traced and has their traces written; one per server, safe from worker threads."""

    def __init__(
        self,
        directory: Path | None = None,
        *,
        tensor_bytes: int = TraceLimits.tensor_bytes,
        queue_traces: int = TraceLimits.queue_traces,
        start_up: dict[str, Any] | None = None,
    ) -> None:
        """`start_up`: the global settings at start-up (TraceStartUp.as_trace_settings()), over Triton's defaults."""
        self.directory = Path(directory) if directory is not None else None
        self.tensor_bytes = tensor_bytes
        self.dropped = 0  # finished traces not written because the writer's queue was full
        try:
            checked = {key: _checked(key, value, self.directory) for key, value in (start_up or {}).items()}
        except InferaError as exc:
            raise SettingError(f"the start-up trace settings (INFERA_TRACE_CONFIG): {exc.message}") from None
        self.start_up: dict[str, Any] = {**DEFAULTS, **{k: v for k, v in checked.items() if v is not None}}
        self._global = _Settings(dict(self.start_up), remaining=int(self.start_up["trace_count"]))
        self._any_level = self.start_up["trace_level"] != ["OFF"]  # whether any settings name a level but OFF
        self._models: dict[str, _Settings] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # the settings; never held while a file is written
        self._queue: queue.Queue[tuple[Trace, Future[None]]] = queue.Queue(maxsize=queue_traces)
        self._writer: threading.Thread | None = None
        self._writer_lock = threading.Lock()
        self._files = _TraceFiles(self.directory)  # the writer thread's own

    # ---- settings

    def settings(self, model: str | None = None) -> dict[str, Any]:
        """The settings in force, global or for `model`; trace_count is the traces still to take, as Triton's."""
        with self._lock:
            merged = dict(self._global.values)
            own = self._models.get(model) if model else None
            if own is not None:
                merged.update(own.values)
            merged["trace_count"] = str(self._in_force(own).remaining)
            return merged

    def update(self, changes: dict[str, Any], model: str | None = None) -> dict[str, Any]:
        """Check every change, then apply them. A value of None clears a setting: a model's falls back to the global
        one, a global one to its start-up value (as Triton's TraceManager does). The settings changed count their
        requests anew (the rate) and keep the traces left unless trace_count itself was set or cleared."""
        if "trace_file" in changes and self.start_up["trace_file"]:
            raise Unsupported(f"{FILE_FIXED} (this server's trace file was set at start-up)")
        checked = {key: _checked(key, value, self.directory) for key, value in changes.items()}
        with self._lock:
            target = self._global if not model else self._models.setdefault(model, _Settings({}))
            was_own = bool(target.values) or not model
            for key, value in checked.items():
                if value is None:
                    target.values.pop(key, None) if model else target.values.__setitem__(key, self.start_up[key])
                else:
                    target.values[key] = value
            target.seen = 0
            if "trace_count" in checked or not was_own:
                own_count = target.values.get("trace_count")
                target.remaining = int(own_count) if own_count is not None else self._global.remaining
            if not model:  # models following the global settings start over from them, as Triton's are remade
                for state in self._models.values():
                    state.seen = 0
                    if "trace_count" not in state.values:
                        state.remaining = self._global.remaining
            every = [self._global, *self._models.values()]
            self._any_level = any(s.values.get("trace_level", ["OFF"]) != ["OFF"] for s in every)
        return self.settings(model)

    def _in_force(self, own: _Settings | None) -> _Settings:
        """Whose counters a model's requests use: its own settings when it has any, else the global ones."""
        return own if own is not None and own.values else self._global

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
            state = self._in_force(own)
            if state.remaining == 0:
                return None
            state.seen += 1
            if state.seen % int(values["trace_rate"]):  # Triton traces the Nth request of every N
                return None
            counted = state.remaining > 0
            if counted:
                state.remaining -= 1
            levels = values["trace_level"]
            return Trace(
                next(self._ids),
                model,
                version,
                with_timestamps="TIMESTAMPS" in levels,
                with_tensors="TENSORS" in levels,
                file=values["trace_file"],
                frequency=int(values["log_frequency"]),
                counted=counted,
                last=counted and state.remaining == 0,
                tensor_budget=self.tensor_bytes,
            )

    async def finish(self, trace: Trace) -> None:
        """Hand a finished trace to the writer thread and wait until it is in its file (the answer follows it there);
        when the writer is a full queue behind, the trace is dropped and counted and nothing waits."""
        written = self.submit(trace)
        if written is not None:
            await asyncio.wrap_future(written)

    def submit(self, trace: Trace) -> Future[None] | None:
        """Queue a finished trace for the writer thread: a future done once it is written, or None when dropped."""
        written: Future[None] = Future()
        try:
            self._queue.put_nowait((trace, written))
        except queue.Full:
            with self._writer_lock:
                self.dropped += 1
                dropped = self.dropped
            if dropped == 1 or dropped % 1000 == 0:
                log.warning("trace writer is behind: %d traces dropped so far (INFERA_TRACE_QUEUE)", dropped)
            return None
        with self._writer_lock:
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_queued, name="infera-trace-writer", daemon=True)
                self._writer.start()
        return written

    def _write_queued(self) -> None:
        """The writer thread: take what is queued, append it to its files, tell the waiting callers; end when idle."""
        while True:
            try:
                batch = [self._queue.get(timeout=WRITER_IDLE_SECONDS)]
            except queue.Empty:
                with self._writer_lock:
                    if self._queue.empty():  # a trace queued after this check finds no writer and starts one
                        self._writer = None
                        return
                continue
            while len(batch) < WRITER_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            traces, waiting = [trace for trace, _ in batch], [written for _, written in batch]
            del batch
            try:
                self._files.write(traces)
            except Exception:  # a full disk or a removed folder must not end the writer with callers waiting
                log.exception("writing %d traces failed", len(traces))
            finally:
                del traces  # nothing of a written trace stays here once its caller hears it is written
                for written in waiting:
                    written.set_result(None)


class _TraceFiles:
    """The trace files as the writer thread appends to them (only that thread uses this)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.begun: set[Path] = set()  # log_frequency 0 files written since this server started (a first truncates)
        self.numbered: dict[Path, list[int]] = {}  # trace_file -> [index of the file being filled, traces in it]

    def write(self, traces: list[Trace]) -> None:
        pending: dict[Path, tuple[bool, list[bytes]]] = {}  # file -> (start it anew, records to add)
        for trace in traces:
            try:
                path = _trace_path(trace.file, self.directory)
            except InferaError as exc:
                log.warning("trace %d not written: %s", trace.id, exc.message)
                continue
            target, fresh = self._target(path, trace)
            records = b",".join(orjson.dumps(record) for record in trace.to_json())
            pending.setdefault(target, (fresh, []))[1].append(records)
        for target, (fresh, pieces) in pending.items():
            _append(target, b",".join(pieces), fresh)

    def _target(self, path: Path, trace: Trace) -> tuple[Path, bool]:
        """The file a trace goes to, and whether it is new. As Triton's TraceFile: log_frequency N writes
        `<file>.<index>`, a new index every N traces; traces under a trace_count go to `<file>.<index>` too, the index
        moving on after the count's last trace; any other trace goes to `<file>` itself."""
        if trace.frequency <= 0 and not trace.counted:
            fresh = path not in self.begun
            self.begun.add(path)
            return path, fresh
        state = self.numbered.setdefault(path, [0, 0])
        target = path.with_name(f"{path.name}.{state[0]}")
        fresh = state[1] == 0
        state[1] += 1
        if trace.last or (trace.frequency > 0 and state[1] >= trace.frequency):
            state[0], state[1] = state[0] + 1, 0
        return target, fresh


def _append(path: Path, records: bytes, fresh: bool) -> None:
    """Add records to a trace file holding one JSON array: "[records]" when new, else its closing "]" becomes
    ",records]". The file is created 0600, and made so if it was not: it holds other callers' tensors."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_TRUNC if fresh else 0)
    descriptor = os.open(path, flags, 0o600)
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise InvalidArgument(f"trace file '{path.name}' is not a regular file")
        os.fchmod(descriptor, 0o600)
        size = status.st_size
        if size >= 2 and os.pread(descriptor, 1, size - 1) == b"]":
            os.pwrite(descriptor, b"," + records + b"]", size - 1)
        else:  # new, or not a JSON array this server wrote: start it
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, b"[" + records + b"]", 0)
    finally:
        os.close(descriptor)


def _first_elements(array: np.ndarray, budget: int) -> tuple[np.ndarray, int]:
    """A copy of the first elements of `array` that fit in `budget` bytes (BYTES: each its length plus 4, as on the
    wire), and the bytes they take."""
    if array.dtype == object:
        count = used = 0
        for item in array.flat:
            cost = (len(item) if isinstance(item, (bytes, str)) else 8) + 4
            if used + cost > budget:
                break
            count, used = count + 1, used + cost
    else:
        count = min(array.size, budget // max(array.itemsize, 1))
        used = count * array.itemsize
    if array.flags.c_contiguous:
        return array.reshape(-1)[:count].copy(), used
    return np.array(list(itertools.islice(array.flat, count)), dtype=array.dtype), used


def _checked(key: str, value: Any, directory: Path | None) -> Any:
    """A setting's value in Triton's form (trace_level a list, the rest strings), or InvalidArgument/Unsupported."""
    if key not in DEFAULTS:
        raise InvalidArgument(f"unknown trace setting {_shown(key)} (known: {', '.join(DEFAULTS)})")
    if value is None:
        return None
    if key == "trace_level":
        levels = [str(level).upper() for level in (value if isinstance(value, list) else [value])]
        unknown = [level for level in levels if level not in LEVELS]
        if unknown or not levels:
            raise InvalidArgument(f"trace_level must be a list of {', '.join(LEVELS)}, got {_shown(value)}")
        chosen = [level for level in ("TIMESTAMPS", "TENSORS") if level in levels]
        return chosen or ["OFF"]
    if isinstance(value, list):
        if len(value) != 1:
            raise InvalidArgument(f"trace setting '{key}' takes one value, got {_shown(value)}")
        value = value[0]
    if isinstance(value, (dict, list, bool)):
        raise InvalidArgument(f"trace setting '{key}' takes a string or a number, got {_shown(value)}")
    text = str(value)
    if key in NUMBER_RANGES:
        try:
            number = int(text)
        except ValueError:
            raise InvalidArgument(f"trace setting '{key}' must be an integer, got {_shown(value)}") from None
        minimum, maximum = NUMBER_RANGES[key]
        if number < minimum:
            raise InvalidArgument(f"trace setting '{key}' must be at least {minimum}, got {number}")
        if number > maximum:
            raise InvalidArgument(f"trace setting '{key}' must be at most {maximum}, got {number}")
        return str(number)
    if key == "trace_mode" and text not in ("triton",):
        raise Unsupported(f"trace_mode {_shown(text)} is not supported: this server writes Triton's trace files only")
    if key == "trace_file" and text:
        _trace_path(text, directory)  # refused now if it could never be written; kept (and shown) as it was set
    return text


def _trace_path(text: str, directory: Path | None) -> Path:
    """Where a trace_file setting writes: a file inside the trace folder, or refused."""
    if directory is None:
        raise Unsupported("this server has no trace folder (INFERA_TRACE_DIR), so it writes no trace files")
    if len(text) > MAX_TRACE_FILE_CHARS:
        raise InvalidArgument(f"trace_file may be at most {MAX_TRACE_FILE_CHARS} characters, got {len(text)}")
    if any(ord(character) < 32 or ord(character) == 127 for character in text):
        raise InvalidArgument(f"trace_file {_shown(text)} holds a control character (NUL, newline, ...)")
    root = directory.resolve()
    try:
        path = Path(text) if Path(text).is_absolute() else root / text
        resolved = path.resolve()
        if not resolved.is_relative_to(root) or resolved == root:
            raise InvalidArgument(f"trace_file {_shown(text)} must be a file in the trace folder (INFERA_TRACE_DIR)")
        resolved.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidArgument(f"trace_file {_shown(text)} cannot be written: {exc.strerror or exc}") from None
    return resolved


def _shown(value: Any) -> str:
    """A value as an error names it, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
