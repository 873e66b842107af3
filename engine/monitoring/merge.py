"""Snapshots of several engines (replicas, workers) combined into one: the numbers of the whole cluster.

Each engine's sampler (engine/monitoring/sampler.py) takes its own snapshot a second; `merge_snapshots` lays the
newest of each over one another. A model version's entries combine as the engines served it together: rates, counts,
pending requests, batch sizes, sequences, streams and a language model's numbers add up (its KV cache's usage over
all its blocks, its prefix-cache hit rate over all lookups); per-request means (latency, queue, compute) are
weighted by each engine's successes; percentiles are the slowest engine's, which bounds the cluster's from above
(the exact figure would need every request's duration). The minute and hour figures of engine/monitoring/history.py
combine the same way (`merge_figures`). A snapshot that came from another process is checked first
(`check_snapshot`): a malformed one is refused alone instead of breaking every merge it would take part in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from engine.monitoring.history import Figures

Snapshot = dict[str, Any]
Entry = dict[str, Any]

SUMMED = (
    "success_per_s",
    "failure_per_s",
    "inferences_per_s",
    "executions_per_s",
    "success_count",
    "failure_count",
    "pending",
)
WEIGHTED = ("mean_latency_ms", "queue_ms", "compute_ms")  # per request: weighted by each engine's successes


def merge_snapshots(snapshots: Sequence[Snapshot]) -> Snapshot:
    """One snapshot of every engine's models and server figures; time, interval and devices are the first's."""
    if not snapshots:
        raise ValueError("nothing to merge")
    first = snapshots[0]
    if len(snapshots) == 1:
        return first
    by_version: dict[tuple[str, int], list[Entry]] = {}
    for snapshot in snapshots:
        for entry in snapshot["models"]:
            by_version.setdefault((entry["name"], entry["version"]), []).append(entry)
    merged: Snapshot = {
        **first,
        "models": [merge_entries(by_version[key]) for key in sorted(by_version)],
        "server": _merge_server([s["server"] for s in snapshots]),
    }
    merged.pop("minute", None)  # minutes close at different moments on each engine: merged where they are kept
    merged.pop("hour", None)
    return merged


def merge_entries(entries: Sequence[Entry]) -> Entry:
    """Several engines' entries of one model version as the one entry of the cluster."""
    if len(entries) == 1:
        return entries[0]
    merged: Entry = {**entries[0]}
    for field in SUMMED:
        values = [e.get(field) for e in entries if e.get(field) is not None]
        merged[field] = round(sum(values), 3) if values else None
    for field in WEIGHTED:
        merged[field] = _weighted((e.get(field), e.get("success_per_s") or 0.0) for e in entries)
    latencies = [e["latency_ms"] for e in entries if e.get("latency_ms")]
    merged["latency_ms"] = {p: max(e[p] for e in latencies if p in e) for p in latencies[0]} if latencies else None
    merged["batch_sizes"] = _added(e.get("batch_sizes") for e in entries)
    merged["protocols"] = {name: round(rate, 3) for name, rate in _added(e.get("protocols") for e in entries).items()}
    sequences = [e["sequences"] for e in entries if e.get("sequences")]
    merged["sequences"] = _added(sequences) if sequences else None
    merged["streams"] = _merge_streams([e["streams"] for e in entries if e.get("streams")])
    merged["llm"] = _merge_llm([e["llm"] for e in entries if e.get("llm")])
    # a version loading on one engine and serving on another is shown by what most of them report
    states = [e.get("state") for e in entries]
    merged["state"] = max(set(states), key=states.count) if states else None
    return merged


def merge_figures(figures: Sequence[Figures]) -> Figures:
    """Several engines' figures of one minute (or of their last hour) as the cluster's."""
    if len(figures) == 1:
        return figures[0]
    models: dict[str, list[dict[str, Any]]] = {}
    for each in figures:
        for name, numbers in each.get("models", {}).items():
            models.setdefault(name, []).append(numbers)
    merged = {key: value for key, value in figures[0].items() if key == "t"}
    merged["seconds"] = max(each["seconds"] for each in figures)
    merged.update(_merge_server(figures))
    merged["models"] = {name: _merge_model_figures(numbers) for name, numbers in sorted(models.items())}
    return merged


def _merge_server(servers: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Requests and failures per second added up, the error rate of their sum, the slowest p99."""
    servers = list(servers)
    requests = sum(s["requests_per_s"] for s in servers)
    failures = sum(s["failures_per_s"] for s in servers)
    return {
        "requests_per_s": round(requests, 3),
        "failures_per_s": round(failures, 3),
        "error_rate": round(failures / requests, 4) if requests > 0 else None,
        "p99_ms": _slowest(s.get("p99_ms") for s in servers),
    }


def _merge_model_figures(numbers: list[dict[str, Any]]) -> dict[str, Any]:
    requests = sum(n["requests_per_s"] for n in numbers)
    failing = sum(n["requests_per_s"] * n["error_rate"] for n in numbers if n.get("error_rate") is not None)
    return {
        "requests_per_s": round(requests, 3),
        "error_rate": round(failing / requests, 4) if requests > 0 else None,
        "p99_ms": _slowest(n.get("p99_ms") for n in numbers),
    }


def _merge_streams(streams: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not streams:
        return None
    merged = {
        "in_flight": sum(s["in_flight"] for s in streams),
        "responses_per_s": round(sum(s["responses_per_s"] for s in streams), 3),
    }
    for field in ("first_response_ms", "between_responses_ms"):
        merged[field] = _weighted((s.get(field), s["responses_per_s"]) for s in streams)
    return merged


_LLM_SUMMED = (
    "running",
    "waiting",
    "kv_cache_blocks",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "preemptions",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "finished_per_s",
)
# each mean time weighted by how many it covers: requests (finished per second as their measure), or tokens
_LLM_WEIGHTED = (
    ("queue_ms", "finished_per_s"),
    ("ttft_ms", "finished_per_s"),
    ("e2e_ms", "finished_per_s"),
    ("itl_ms", "generation_tokens_per_s"),
)


def _merge_llm(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not entries:
        return None
    merged: dict[str, Any] = {field: round(sum(e.get(field) or 0 for e in entries), 3) for field in _LLM_SUMMED}
    blocks = merged["kv_cache_blocks"]
    used = sum((e.get("kv_cache_usage") or 0) * (e.get("kv_cache_blocks") or 0) for e in entries)
    merged["kv_cache_usage"] = round(used / blocks, 4) if blocks else 0.0
    queries = merged["prefix_cache_queries"]
    merged["prefix_cache_hit_rate"] = round(merged["prefix_cache_hits"] / queries, 4) if queries else None
    for field, weight in _LLM_WEIGHTED:
        merged[field] = _weighted((e.get(field), e.get(weight) or 0.0) for e in entries)
    return merged


def _weighted(pairs: Iterable[tuple[float | None, float]]) -> float | None:
    """The mean of the values, each weighted (values without weight count when nothing has any)."""
    present = [(value, weight) for value, weight in pairs if value is not None]
    total = sum(weight for _, weight in present)
    if not present:
        return None
    if total <= 0:
        return round(sum(value for value, _ in present) / len(present), 3)
    return round(sum(value * weight for value, weight in present) / total, 3)


def _added(mappings: Iterable[dict[str, Any] | None]) -> dict[str, Any]:
    total: dict[str, Any] = {}
    for mapping in mappings:
        for key, value in (mapping or {}).items():
            total[key] = total.get(key, 0) + value
    return dict(sorted(total.items(), key=lambda item: _order(item[0])))


def _order(key: str) -> tuple[int, Any]:
    return (0, int(key)) if key.isdigit() else (1, key)


def _slowest(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return max(present) if present else None


def check_snapshot(snapshot: Any) -> Snapshot:
    """`snapshot` (another engine's, as it arrived) when it holds what merging reads, with the types it needs;
    ValueError naming the first field that does not."""
    _expect(isinstance(snapshot, dict), "snapshot", "an object")
    _expect(_is_int(snapshot.get("t")), "t", "a time in ms")
    _expect(isinstance(snapshot.get("devices"), dict), "devices", "an object")
    _check_server(snapshot.get("server"), "server")
    models = snapshot.get("models")
    _expect(isinstance(models, list), "models", "a list")
    for entry in models:
        _check_entry(entry)
    for key in ("minute", "hour"):
        if key in snapshot:
            check_figures(snapshot[key], key)
    if "minute" in snapshot:
        _expect(_is_int(snapshot["minute"].get("t")), "minute.t", "a time in ms")
    return snapshot


def check_figures(figures: Any, where: str) -> None:
    """A minute's or an hour's figures as `merge_figures` reads them; ValueError naming the field."""
    _check_server(figures, where)
    _expect(_is_number(figures.get("seconds")), f"{where}.seconds", "a number")
    models = figures.get("models", {})
    _expect(isinstance(models, dict), f"{where}.models", "an object")
    for name, numbers in models.items():
        _expect(isinstance(numbers, dict), f"{where}.models.{name}", "an object")
        _expect(_is_number(numbers.get("requests_per_s")), f"{where}.models.{name}.requests_per_s", "a number")
        for field in ("error_rate", "p99_ms"):
            _expect(_is_optional_number(numbers.get(field)), f"{where}.models.{name}.{field}", "a number or null")


def _check_server(server: Any, where: str) -> None:
    _expect(isinstance(server, dict), where, "an object")
    for field in ("requests_per_s", "failures_per_s"):
        _expect(_is_number(server.get(field)), f"{where}.{field}", "a number")
    _expect(_is_optional_number(server.get("p99_ms")), f"{where}.p99_ms", "a number or null")


def _check_entry(entry: Any) -> None:
    _expect(isinstance(entry, dict), "models[]", "an object")
    _expect(isinstance(entry.get("name"), str) and _is_int(entry.get("version")), "models[]", "a name and a version")
    where = f"models[{entry['name'][:64]!r} {entry['version']}]"
    _expect(_is_number(entry.get("success_per_s")), f"{where}.success_per_s", "a number")
    for field in SUMMED + WEIGHTED:
        _expect(_is_optional_number(entry.get(field)), f"{where}.{field}", "a number or null")
    for field in ("latency_ms", "batch_sizes", "protocols", "sequences"):
        _expect(_is_numbers(entry.get(field)), f"{where}.{field}", "an object of numbers or null")
    llm = entry.get("llm")
    _expect(
        llm is None or (isinstance(llm, dict) and all(_is_optional_number(v) for v in llm.values())),
        f"{where}.llm",
        "an object of numbers (or nulls) or null",
    )
    streams = entry.get("streams")
    if streams is not None:
        _expect(isinstance(streams, dict), f"{where}.streams", "an object or null")
        for field in ("in_flight", "responses_per_s"):
            _expect(_is_number(streams.get(field)), f"{where}.streams.{field}", "a number")
        for field in ("first_response_ms", "between_responses_ms"):
            _expect(_is_optional_number(streams.get(field)), f"{where}.streams.{field}", "a number or null")


def _expect(ok: bool, field: str, what: str) -> None:
    if not ok:
        raise ValueError(f"snapshot field '{field}' must be {what}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_optional_number(value: Any) -> bool:
    return value is None or _is_number(value)


def _is_numbers(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and all(_is_number(v) for v in value.values()))
