"""Metrics that model code defines (Triton's pb_utils.MetricFamily): kept per family and label set, on /metrics.

Updates arrive from model threads and stub readers, so every change holds one lock. A family lives while some
model instance holds it (its `owners`); when the last owner unloads, the family leaves /metrics.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric as PrometheusFamily

from engine.errors import InvalidArgument

KINDS = ("counter", "gauge", "histogram")
# names the server's own families use: a model may not shadow them
RESERVED_PREFIXES = ("nv_", "infera_")

LabelKey = tuple[tuple[str, str], ...]


@dataclass
class _Series:
    value: float = 0.0
    buckets: list[float] | None = None
    counts: list[int] = field(default_factory=list)  # per bucket, not cumulative
    count: int = 0


@dataclass
class _Family:
    name: str
    description: str
    kind: str
    owners: set[str] = field(default_factory=set)
    series: dict[LabelKey, _Series] = field(default_factory=dict)


class CustomMetrics:
    """Every custom metric family of the models this engine serves."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        self._lock = threading.Lock()

    def declare(self, owner: str, name: str, description: str, kind: str) -> None:
        """Add (or join) a family; a name already declared with another kind or text is refused."""
        if kind not in KINDS:
            raise InvalidArgument(f"metric family '{name}' has an unknown kind '{kind}'")
        if name.startswith(RESERVED_PREFIXES):
            raise InvalidArgument(f"metric family '{name}' uses a prefix the server's own metrics use")
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = _Family(name, description, kind)
            elif family.kind != kind or family.description != description:
                raise InvalidArgument(
                    f"metric family '{name}' is already declared as a {family.kind} with description "
                    f"'{family.description}'"
                )
            family.owners.add(owner)

    def update(
        self, name: str, labels: dict[str, str], action: str, value: float, buckets: list[float] | None = None
    ) -> None:
        """create, increment, set or observe one labelled series of a declared family."""
        with self._lock:
            family = self._family(name)
            key = _key(labels)
            series = family.series.get(key)
            if series is None:
                series = family.series[key] = _Series()
                if family.kind == "histogram":
                    series.buckets = sorted(buckets or [])
                    series.counts = [0] * (len(series.buckets) + 1)
            if action == "increment":
                series.value += value
            elif action == "set":
                series.value = value
            elif action == "observe":
                series.value += value
                series.count += 1
                series.counts[bisect.bisect_left(series.buckets or [], value)] += 1
            elif action != "create":
                raise InvalidArgument(f"metric '{name}': unknown action '{action}'")

    def value(self, name: str, labels: dict[str, str]) -> float:
        with self._lock:
            series = self._family(name).series.get(_key(labels))
            return series.value if series is not None else 0.0

    def release(self, owner: str, name: str | None = None) -> None:
        """`owner` lets go of one family (or of all of them); a family nobody holds leaves /metrics."""
        with self._lock:
            for family in [self._families[name]] if name in self._families else list(self._families.values()):
                if name is None or family.name == name:
                    family.owners.discard(owner)
                    if not family.owners:
                        del self._families[family.name]

    def collect(self) -> Iterable[PrometheusFamily]:
        with self._lock:
            families = [(f.name, f.description, f.kind, dict(f.series)) for f in self._families.values()]
        for name, description, kind, series in sorted(families):
            family = PrometheusFamily(name, description, kind)
            for key, one in sorted(series.items()):
                labels = dict(key)
                if kind != "histogram":
                    family.add_sample(name, labels, one.value)
                    continue
                running = 0
                for bound, count in zip([*(one.buckets or []), float("inf")], one.counts, strict=True):
                    running += count
                    family.add_sample(f"{name}_bucket", labels | {"le": _bound(bound)}, running)
                family.add_sample(f"{name}_count", labels, one.count)
                family.add_sample(f"{name}_sum", labels, one.value)
            yield family

    def _family(self, name: str) -> _Family:
        family = self._families.get(name)
        if family is None:
            raise InvalidArgument(f"metric family '{name}' is not declared")
        return family


def _key(labels: dict[str, str]) -> LabelKey:
    return tuple(sorted(labels.items()))


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))
