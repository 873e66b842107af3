"""The memory budget in /metrics (engine/serving/memory_budget.py): loads, evictions, what each version holds, the
budget and its use per pool, and the cold-start latency of on-demand loads."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from engine.serving.memory_budget import COLD_START_BUCKETS, HOST, MemoryGovernor


def memory_families(
    governor: MemoryGovernor, served: Iterable[Any], labels: Callable[[Any], dict[str, str]]
) -> Iterable[Metric]:
    """The budget's families; each version's samples labelled by `labels(version)` (ensembles hold nothing)."""
    versions = [version for version in served if version.config.backend_name != "ensemble"]
    loads = Metric("infera_model_loads", "Loads of a model version's instances (on demand too).", "counter")
    evictions = Metric(
        "infera_model_evictions", "Times a version was unloaded to make room in the memory budget.", "counter"
    )
    resident = Metric(
        "infera_model_resident_bytes",
        "Bytes a version is charged in the memory budget now, per pool (0 while an on-demand version is parked).",
        "gauge",
    )
    footprint = Metric("infera_model_footprint_bytes", "Bytes a version's last load took, measured, per pool.", "gauge")
    for version in versions:
        residency = version.residency
        loads.add_sample(loads.name, labels(version), residency.loads)
        evictions.add_sample(evictions.name, labels(version), residency.evictions)
        for pool, size in sorted(residency.footprint.items()):
            footprint.add_sample(footprint.name, labels(version) | {"pool": pool}, size)
            resident.add_sample(resident.name, labels(version) | {"pool": pool}, residency.charged.get(pool, 0))
    yield from (loads, evictions, resident, footprint)
    budget = Metric(
        "infera_memory_budget_bytes", "The memory budget of a pool (host, gpu<N>), when one is set.", "gauge"
    )
    used = Metric("infera_memory_budget_used_bytes", "Bytes charged to loaded and loading versions, per pool.", "gauge")
    for pool in sorted({HOST, *governor.budgets}):
        if pool in governor.budgets:
            budget.add_sample(budget.name, {"pool": pool}, governor.budgets[pool])
        used.add_sample(used.name, {"pool": pool}, governor.used(pool))
    yield from (budget, used)
    cold = Metric(
        "infera_model_cold_start_seconds",
        "From the request that found an on-demand version parked to its instances loaded.",
        "histogram",
    )
    for bound, count in zip(COLD_START_BUCKETS, governor.cold_start_buckets, strict=True):  # cumulative already
        cold.add_sample(f"{cold.name}_bucket", {"le": floatToGoString(bound)}, count)
    cold.add_sample(f"{cold.name}_bucket", {"le": "+Inf"}, governor.cold_start_count)
    cold.add_sample(f"{cold.name}_count", {}, governor.cold_start_count)
    cold.add_sample(f"{cold.name}_sum", {}, governor.cold_start_sum)
    yield cold
