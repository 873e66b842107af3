"""Custom metrics (`MetricFamily`, `Metric`) and log lines (`Logger`) from model code, through its host."""

from __future__ import annotations

import contextlib
import logging

from engine.backends.python_api_errors import TritonModelException
from engine.backends.python_api_host import current_host


class MetricFamily:
    """A family of custom metrics the model exports on /metrics: COUNTER, GAUGE or HISTOGRAM."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2
    KINDS = {COUNTER: "counter", GAUGE: "gauge", HISTOGRAM: "histogram"}

    def __init__(self, name: str, description: str, kind: int) -> None:
        if kind not in self.KINDS:
            raise TritonModelException(f"metric family '{name}': kind must be COUNTER, GAUGE or HISTOGRAM")
        if not isinstance(name, str) or not name or not (name[0].isalpha() or name[0] == "_"):
            raise TritonModelException(f"metric family name {name!r} must start with a letter or '_'")
        if not all(ch.isalnum() or ch in "_:" for ch in name):
            raise TritonModelException(f"metric family name {name!r} may hold only letters, digits, '_' and ':'")
        self.name = name
        self.description = description
        self.kind = kind
        self._host = current_host()
        self._host.metric_family(self)

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> Metric:  # noqa: N802
        return Metric(self, labels or {}, buckets)

    def __del__(self) -> None:
        host = getattr(self, "_host", None)
        if host is not None:
            with contextlib.suppress(Exception):  # the host may be gone at interpreter exit
                host.metric_release(self)


class Metric:
    """One labelled metric of a family: increment (counter, gauge), set (gauge), observe (histogram), value."""

    def __init__(self, family: MetricFamily, labels: dict[str, str], buckets: list[float] | None = None) -> None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise TritonModelException(f"metric labels of '{family.name}' must map strings to strings")
        if family.kind == MetricFamily.HISTOGRAM:
            if not buckets or list(buckets) != sorted(buckets):
                raise TritonModelException(f"histogram '{family.name}' needs buckets in increasing order")
        elif buckets is not None:
            raise TritonModelException(f"metric '{family.name}' is not a histogram; it takes no buckets")
        self.family = family
        self.labels = dict(labels)
        self.buckets = [float(b) for b in buckets] if buckets else None
        family._host.metric_update(self, "create", 0.0)

    def increment(self, value: float) -> None:
        if self.family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException(f"histogram '{self.family.name}' takes observe(), not increment()")
        if self.family.kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException(f"counter '{self.family.name}' cannot be incremented by a negative value")
        self.family._host.metric_update(self, "increment", float(value))

    def set(self, value: float) -> None:
        if self.family.kind != MetricFamily.GAUGE:
            raise TritonModelException(f"only a gauge can be set; '{self.family.name}' is not one")
        self.family._host.metric_update(self, "set", float(value))

    def observe(self, value: float) -> None:
        if self.family.kind != MetricFamily.HISTOGRAM:
            raise TritonModelException(f"only a histogram observes; '{self.family.name}' is not one")
        self.family._host.metric_update(self, "observe", float(value))

    def value(self) -> float:
        """The current value (a histogram's sum)."""
        return self.family._host.metric_value(self)


# ---- logging (pb_utils.Logger)


class LogLevel:
    INFO = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR
    VERBOSE = logging.DEBUG


class Logger:
    """Log lines from model code, written to the server's log with the model's name."""

    @staticmethod
    def log(message: str, level: int = LogLevel.INFO) -> None:
        current_host().log(level, str(message))

    @staticmethod
    def log_info(message: str) -> None:
        Logger.log(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        Logger.log(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        Logger.log(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        Logger.log(message, LogLevel.VERBOSE)
