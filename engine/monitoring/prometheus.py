"""/metrics in Prometheus text format with Triton's metric names and labels, read from the engine at scrape time.

Triton declares its counters as `counter` under names without a `_total` suffix (`nv_inference_count`), and
existing Triton dashboards query exactly those names. prometheus_client's own writer appends `_total` to every
counter, so the families are built with prometheus_client here and written by `render_metrics`, which keeps the
declared names. prometheus_client's parser reads the result back (tests/engine/monitoring/test_prometheus.py).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import METRIC_TYPES, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from engine.monitoring.devices import DeviceSampler
from engine.monitoring.llm import llm_families
from engine.monitoring.memory import memory_families
from engine.serving.streams import FIRST_RESPONSE_BUCKETS_MS

if TYPE_CHECKING:
    from engine.monitoring.sampler import MetricsSampler
    from engine.serving.server import InferenceServer

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# (name, help, how to read the value from a ModelStats); Triton's help texts, shortened
_MODEL_COUNTERS: tuple[tuple[str, str, Callable[[Any], int]], ...] = (
    (
        "nv_inference_request_success",
        "Number of successful inference requests, all batch sizes",
        lambda s: s.success.count,
    ),
    ("nv_inference_request_failure", "Number of failed inference requests, all batch sizes", lambda s: s.fail.count),
    ("nv_inference_count", "Number of inferences performed", lambda s: s.inference_count),
    ("nv_inference_exec_count", "Number of model executions performed", lambda s: s.execution_count),
    (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds",
        lambda s: s.success.ns // 1000,
    ),
    (
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds",
        lambda s: s.queue.ns // 1000,
    ),
    (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds",
        lambda s: s.compute_input.ns // 1000,
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds",
        lambda s: s.compute_infer.ns // 1000,
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds",
        lambda s: s.compute_output.ns // 1000,
    ),
)

# a device sample older than this many sampler intervals is stale: the scrape reads the devices itself
_STALE_INTERVALS = 3


# what each worker of `serve --workers` publishes of its families: [name, type, help, [[sample, labels, value]]]
FamilyData = list[Any]
WorkerFamilies = Callable[[], list[tuple[str, list[FamilyData]]]]
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def check_families(data: Any) -> list[FamilyData]:
    """Another worker's families (`families_data`, as they arrived) when every name, type, label and value is one
    the exposition can hold; ValueError naming the first that is not (a bad one would break every scrape)."""
    if not isinstance(data, list):
        raise ValueError("worker families must be a list")
    for family in data:
        if not (isinstance(family, list) and len(family) == 4):
            raise ValueError("a worker family is [name, type, help, samples]")
        name, kind, documentation, samples = family
        if not (isinstance(name, str) and _METRIC_NAME.fullmatch(name)):
            raise ValueError(f"not a metric name: {str(name)[:100]!r}")
        if kind not in METRIC_TYPES or not isinstance(documentation, str) or not isinstance(samples, list):
            raise ValueError(f"family {name}: a type, a help text and a list of samples")
        for sample in samples:
            _check_sample(name, sample)
    return data


def _check_sample(family: str, sample: Any) -> None:
    if not (isinstance(sample, list) and len(sample) == 3):
        raise ValueError(f"family {family}: a sample is [name, labels, value]")
    name, labels, value = sample
    if not (isinstance(name, str) and name.startswith(family) and _METRIC_NAME.fullmatch(name)):
        raise ValueError(f"family {family}: not one of its sample names: {str(name)[:100]!r}")
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and _LABEL_NAME.fullmatch(k) and isinstance(v, str) for k, v in labels.items()
    ):
        raise ValueError(f"family {family}: labels are names and text")
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(f"family {family}: a sample's value is a number")


class EngineCollector(Collector):
    """Collects every model version's counters and every device's gauges when Prometheus scrapes.

    `replica` adds `infera_replica_info{replica="..."} 1`: Prometheus labels each scraped target itself (`instance`,
    and `pod` under Kubernetes), so the series keep Triton's labels and a dashboard joins the replica's name in when
    it wants it. Behind one port, `serve --workers` runs several engines that no target label tells apart: with
    `workers`, every engine series is each worker's, as that worker last published it (console/monitoring/
    cluster.py), labelled `worker="<replica>-w<k>"`, so any worker answers the scrape with all of them and
    `sum by (model)` is the replica's total. The device gauges describe the host, once.
    """

    def __init__(
        self,
        server: InferenceServer,
        sampler: MetricsSampler | None = None,
        *,
        replica: str | None = None,
        workers: WorkerFamilies | None = None,
    ) -> None:
        self.server = server
        self.sampler = sampler
        self.replica = replica
        self.workers = workers
        self._own_devices: DeviceSampler | None = None

    def collect(self) -> Iterable[Metric]:
        if self.replica is not None:
            info = Metric("infera_replica_info", "The replica (serve process) that answers this scrape.", "gauge")
            info.add_sample(info.name, {"replica": self.replica}, 1)
            yield info
        published = self.workers() if self.workers is not None else []
        if published:
            yield from _worker_families(published)
        else:
            yield from self.engine_families()
        yield from _device_families(self._device_dict())

    def families_data(self) -> list[FamilyData]:
        """This engine's families as plain data, for the other workers to answer scrapes with."""
        return [
            [f.name, f.type, f.documentation, [[s.name, s.labels, s.value] for s in f.samples]]
            for f in self.engine_families()
        ]

    def engine_families(self) -> Iterable[Metric]:
        """The families of this engine's models (everything but the host's devices)."""
        served = sorted(self.server.served_versions(), key=lambda s: (s.name, s.version))
        for name, documentation, read in _MODEL_COUNTERS:
            family = Metric(name, documentation, "counter")
            for version in served:
                family.add_sample(name, _model_labels(version), read(version.stats))
            yield family
        pending = Metric(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.",
            "gauge",
        )
        for version in served:
            pending.add_sample(pending.name, _model_labels(version), version.stats.pending)
        yield pending
        for key, family_name, documentation in (
            ("live", "infera_sequences_live", "Live sequences of a sequence model (started, not ended or idled out)."),
            ("backlog", "infera_sequence_backlog", "Sequences waiting for a batch slot or an instance."),
            ("slots_used", "infera_sequence_slots_used", "Batch slots (direct) or candidacies (oldest) in use."),
        ):
            family = Metric(family_name, documentation, "gauge")
            for version in served:
                if version.stats.sequences is not None:
                    family.add_sample(family_name, _model_labels(version), version.stats.sequences[key])
            yield family
        yield from _stream_families(served)
        yield from llm_families(served, _model_labels)
        if getattr(self.server, "memory", None) is not None:
            yield from memory_families(self.server.memory, served, _model_labels)
        yield from _traffic_families(getattr(self.server, "traffic", {}))
        restarts = Metric(
            "infera_instance_restarts",
            "Times a model instance's process (a python model's stub) died and was started again.",
            "counter",
        )
        for version in served:
            for instance in version.instances:
                count = getattr(instance.backend, "restarts", None)
                if count is not None:
                    labels = _model_labels(version) | {"instance": instance.backend.context.instance_name}
                    restarts.add_sample(restarts.name, labels, count)
        yield restarts
        yield from self.server.custom_metrics.collect()

    def _device_dict(self) -> dict[str, Any]:
        """The sampler's newest device sample when fresh; otherwise a reading taken now."""
        sampler = self.sampler
        if sampler is not None and sampler.latest is not None:
            age_ms = sampler.wall_clock() * 1000 - sampler.latest["t"]
            if age_ms <= _STALE_INTERVALS * sampler.interval * 1000:
                return sampler.latest["devices"]
        if sampler is not None:
            return sampler.devices.sample().to_dict()
        if self._own_devices is None:
            self._own_devices = DeviceSampler()
        return self._own_devices.sample().to_dict()


def _worker_families(workers: list[tuple[str, list[FamilyData]]]) -> Iterable[Metric]:
    """Every worker's families in one exposition, each sample labelled with its worker."""
    families: dict[str, Metric] = {}
    for worker, data in workers:
        for name, kind, documentation, samples in data:
            family = families.get(name)
            if family is None:
                family = families[name] = Metric(name, documentation, kind)
            for sample_name, labels, value in samples:
                family.add_sample(sample_name, {**labels, "worker": worker}, value)
    return families.values()


def _stream_families(served: list[Any]) -> Iterable[Metric]:
    """Decoupled models' streams: Triton's time-to-first-response histogram, then responses, gaps and streams."""
    first = Metric(
        "nv_inference_first_response_histogram_ms",
        "Duration from request to first response in milliseconds",
        "histogram",
    )
    families = {
        "responses": Metric(
            "infera_stream_responses", "Responses a decoupled model sent (tokens, for a generator).", "counter"
        ),
        "between_us": Metric(
            "infera_stream_inter_response_duration_us",
            "Cumulative time between consecutive responses of one stream, in microseconds.",
            "counter",
        ),
        "between_count": Metric(
            "infera_stream_inter_response_count", "Gaps between consecutive responses of one stream.", "counter"
        ),
        "in_flight": Metric("infera_streams_in_flight", "Streams whose final response has not been sent.", "gauge"),
        "cancelled": Metric("infera_streams_cancelled", "Streams whose client went away before the end.", "counter"),
    }
    for version in served:
        streams = version.stats.streams
        if streams is None:
            continue
        labels = _model_labels(version)
        for bound, count in zip(FIRST_RESPONSE_BUCKETS_MS, streams.first_response_buckets, strict=True):
            first.add_sample(f"{first.name}_bucket", labels | {"le": floatToGoString(bound)}, count)
        first.add_sample(f"{first.name}_bucket", labels | {"le": "+Inf"}, streams.first_response_count)
        first.add_sample(f"{first.name}_count", labels, streams.first_response_count)
        first.add_sample(f"{first.name}_sum", labels, streams.first_response_ns / 1e6)
        values = {
            "responses": streams.responses,
            "between_us": streams.between_ns // 1000,
            "between_count": streams.between_count,
            "in_flight": streams.in_flight,
            "cancelled": streams.cancelled,
        }
        for key, family in families.items():
            family.add_sample(family.name, labels, values[key])
    yield first
    yield from families.values()


def _traffic_families(traffic: dict[str, Any]) -> Iterable[Metric]:
    """Each model's traffic policy (an info metric), its canary weights and its shadow agreement counts."""
    # an info metric written as a gauge of 1: the 0.0.4 text format has no info type
    policy = Metric("infera_traffic_policy_info", "The traffic policy of a model across its versions.", "gauge")
    weights = Metric("infera_traffic_weight", "The share of unversioned requests a canary sends a version.", "gauge")
    agreement = Metric(
        "infera_shadow_comparisons", "Outputs of shadow copies compared with the active version's.", "counter"
    )
    for model, state in sorted(traffic.items()):
        policy.add_sample("infera_traffic_policy_info", {"model": model, "mode": state.policy.mode}, 1)
        total = sum(state.policy.weights.values()) or 1.0
        for version, weight in sorted(state.policy.weights.items()):
            weights.add_sample(weights.name, {"model": model, "version": str(version)}, weight / total)
        for output, counts in sorted(state.comparison.counts.items()):
            for result, count in zip(("agree", "disagree"), counts, strict=True):
                labels = {"model": model, "output": output, "result": result}
                agreement.add_sample(agreement.name, labels, count)
    yield from (policy, weights, agreement)


def _model_labels(served: Any) -> dict[str, str]:
    return {"model": served.name, "version": str(served.version)}


def _device_families(devices: dict[str, Any]) -> Iterable[Metric]:
    gpus = devices["gpus"]
    for name, documentation, key, scale in (
        ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "utilization", 1),
        ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "memory_total_bytes", 1),
        ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "memory_used_bytes", 1),
        ("nv_gpu_power_usage", "GPU power usage in watts", "power_watts", 1),
    ):
        family = Metric(name, documentation, "gauge")
        for gpu in gpus:
            if gpu[key] is not None:
                family.add_sample(name, {"gpu_uuid": gpu["uuid"]}, gpu[key] * scale)
        yield family
    cpu = devices["cpu"]
    for name, documentation, value in (
        ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", cpu["utilization"]),
        ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", cpu["memory_total_bytes"]),
        ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", cpu["memory_used_bytes"]),
    ):
        family = Metric(name, documentation, "gauge")
        family.add_sample(name, {}, value)
        yield family


def render_metrics(registry: Collector) -> bytes:
    """The Prometheus text format (0.0.4) of `registry`, keeping each family's declared name and type."""
    lines: list[str] = []
    for family in registry.collect():
        documentation = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        lines.append(f"# HELP {family.name} {documentation}")
        lines.append(f"# TYPE {family.name} {_exposition_type(family.type)}")
        for sample in family.samples:
            labels = ",".join(f'{key}="{_escape_label(value)}"' for key, value in sorted(sample.labels.items()))
            lines.append(
                f"{sample.name}{{{labels}}} {_number(sample.value)}"
                if labels
                else f"{sample.name} {_number(sample.value)}"
            )
    return ("\n".join(lines) + "\n").encode()


def _exposition_type(kind: str) -> str:
    return "untyped" if kind == "unknown" else kind


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _number(value: float) -> str:
    # counters stay integers on the wire, as Triton writes them
    return str(value) if isinstance(value, int) else floatToGoString(value)


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class MetricsApp:
    """ASGI app answering GET /metrics; other paths go to `fallback` (404 without one)."""

    def __init__(
        self,
        server: InferenceServer,
        sampler: MetricsSampler | None = None,
        *,
        fallback: ASGIApp | None = None,
        path: str = "/metrics",
        replica: str | None = None,
        workers: WorkerFamilies | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = EngineCollector(server, sampler, replica=replica, workers=workers)
        self.registry.register(self.collector)
        self.fallback = fallback
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].rstrip("/") != self.path:
            if self.fallback is not None:
                await self.fallback(scope, receive, send)
            else:
                await _respond(send, 404, b"not found\n", "text/plain; charset=utf-8")
            return
        if scope["method"] not in ("GET", "HEAD"):
            await _respond(send, 405, b"method not allowed: use GET\n", "text/plain; charset=utf-8", allow=b"GET, HEAD")
            return
        body = render_metrics(self.registry)
        await _respond(send, 200, b"" if scope["method"] == "HEAD" else body, CONTENT_TYPE, length=len(body))


async def _respond(
    send: Send, status: int, body: bytes, content_type: str, *, length: int | None = None, allow: bytes | None = None
) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body) if length is None else length).encode()),
    ]
    if allow is not None:
        headers.append((b"allow", allow))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
