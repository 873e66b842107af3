"""Model analysis: candidate configs of a loaded version measured under in-process load, none of them serving.

Each candidate (a small change of the version's config: max batch size, queue delay, instance count) is loaded as
a `TemporaryVersion`: a version object the model manager never holds, so no request reaches it, neither one that
names no version nor one that names a version; it is unloaded when its measurements are over, whatever happens.
An in-process load generator (asyncio callers, each sending its next request when its last one is answered) drives
it at each concurrency level for a fixed time, with the model's own input shapes (random data within each dtype, or
sample inputs). A point records throughput, latency percentiles, the mean batch formed, failures, and how many
client requests the model's served versions answered meanwhile (the analysis' load is not theirs).
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from itertools import product
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.config.datatypes import numpy_dtype
from engine.config.model_config import DynamicBatching, InstanceGroup, ModelConfig, cpu_instance_count
from engine.config.text_format import config_to_dict, merge_config
from engine.config.validate import validate_config
from engine.errors import InferaError, InvalidArgument
from engine.protocol.validation import check_input, check_required_inputs, common_batch_size, input_config
from engine.serving import admission
from engine.serving.lifecycle import ServedVersion
from engine.settings import ConfigLimits
from engine.types import InferenceRequest

if TYPE_CHECKING:
    from engine.serving.admission import Principal
    from engine.serving.server import InferenceServer

TEMPORARY_VERSION = 0  # never a Triton version (version folders are 1, 2, ...): what logs and stats name it
INT_BOUND = 1 << 15  # random integers stay within ±2^15, so a sum or product of two fits the narrowest wide type
SEED = 0


@dataclass(frozen=True)
class Candidate:
    """One config to measure: a partial JSON config (Triton's field names) over the analysed version's config."""

    label: str
    override: dict[str, Any]


@dataclass(frozen=True)
class LoadPoint:
    """What one candidate did at one concurrency level."""

    candidate: int
    concurrency: int
    requests: int  # answered
    failures: int
    seconds: float
    throughput: float  # inferences per second (requests times their batch size)
    p50_ms: float | None
    p99_ms: float | None
    mean_batch: float  # the mean batch size the scheduler formed
    client_requests: int  # requests the model's served versions answered meanwhile: traffic that is not the analysis'
    error: str = ""  # the first failure's message

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def concurrency_levels(maximum: int) -> list[int]:
    """1, 2, 4, ... up to `maximum`, which is always included."""
    if maximum < 1:
        raise InvalidArgument(f"the maximum concurrency must be 1 or more, got {maximum}")
    levels = [1]
    while levels[-1] * 2 < maximum:
        levels.append(levels[-1] * 2)
    return levels + ([maximum] if maximum > 1 else [])


def grid_candidates(
    base: ModelConfig, max_batch_sizes: list[int], queue_delays_us: list[int], instance_counts: list[int]
) -> list[Candidate]:
    """Every combination of the three knobs over `base`, in the order given; empty lists keep the base's value."""
    if base.sequence_batching is not None or base.ensemble_scheduling is not None or base.backend_name == "ensemble":
        raise InvalidArgument(
            f"model '{base.name}': only models with the default or the dynamic batcher can be analysed "
            "(sequence models and ensembles cannot)"
        )
    group = copy.deepcopy(base.instance_group[0]) if base.instance_group else InstanceGroup(count_given=False)
    # the count the base serves with: a CPU group that names none gets Triton's default (engine.config.model_config)
    served_count = group.count if group.kind == "KIND_GPU" else cpu_instance_count(group, base.backend_name)
    delay = base.dynamic_batching.max_queue_delay_microseconds if base.dynamic_batching else 0
    candidates = []
    for size, wait, count in product(
        max_batch_sizes or [base.max_batch_size], queue_delays_us or [delay], instance_counts or [served_count]
    ):
        if (size > 0) != (base.max_batch_size > 0):
            raise InvalidArgument(
                f"model '{base.name}': max_batch_size {size} in the grid: a model "
                + ("that batches needs 1 or more" if base.max_batch_size > 0 else "that does not batch keeps 0")
            )
        if wait and size == 0:
            raise InvalidArgument(f"model '{base.name}': a queue delay needs a model that batches (max_batch_size > 0)")
        config = copy.deepcopy(base)
        config.max_batch_size = size
        config.instance_group = [InstanceGroup(name=group.name, count=count, kind=group.kind, gpus=list(group.gpus))]
        label = f"batch {size} · delay {wait} µs · {count} instance{'s' if count != 1 else ''}"
        override: dict[str, Any] = {"max_batch_size": size}
        if size > 0:
            batching = copy.deepcopy(base.dynamic_batching) if base.dynamic_batching else DynamicBatching()
            batching.max_queue_delay_microseconds = wait
            batching.preferred_batch_size = [p for p in batching.preferred_batch_size if p <= size]
            config.dynamic_batching = batching
            override["dynamic_batching"] = config_to_dict(config)["dynamic_batching"]
        override["instance_group"] = config_to_dict(config)["instance_group"]
        candidates.append(Candidate(label, override))
    return candidates


def candidate_config(base: ModelConfig, candidate: Candidate, limits: ConfigLimits) -> ModelConfig:
    """The config a candidate loads with, checked as a load would check it (InvalidArgument naming the field)."""
    config = merge_config(base, candidate.override, source=f"model '{base.name}': candidate '{candidate.label}'")
    validate_config(config)
    admission.check_limits(config, limits)
    return config


def analysis_inputs(config: ModelConfig, sample: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], int]:
    """(inputs, batch size) of one request: `sample` (name -> nested list, shaped as a request) checked against the
    config, else random data within each input's dtype, one item per request, variable dimensions 1."""
    if sample:
        arrays: dict[str, np.ndarray] = {}
        batches: dict[str, int] = {}
        for name, value in sample.items():
            tensor = input_config(config, name)
            try:
                array = np.asarray(value, dtype=numpy_dtype(tensor.datatype))
            except (TypeError, ValueError) as exc:
                raise InvalidArgument(f"sample input '{name}': not {tensor.datatype} data: {exc}") from None
            if tensor.datatype == "BYTES":
                array = np.vectorize(_as_bytes, otypes=[object])(array)
            batches[name] = check_input(config, tensor, tensor.datatype, list(array.shape))
            arrays[name] = array
        check_required_inputs(config, arrays)
        return arrays, common_batch_size(config, batches)
    rng = np.random.default_rng(SEED)
    arrays = {}
    for tensor in config.input:
        shape = ([1] if config.max_batch_size > 0 else []) + [max(d, 1) for d in tensor.dims]
        arrays[tensor.name] = random_tensor(rng, tensor.datatype, shape)
    return arrays, 1


def random_tensor(rng: np.random.Generator, datatype: str, shape: list[int]) -> np.ndarray:
    """Random values of a wire datatype: floats in [0, 1), integers within the type (and ±INT_BOUND), digits."""
    if datatype == "BYTES":
        return np.array([str(v).encode() for v in rng.integers(0, 100, size=shape).ravel()], dtype=object).reshape(
            shape
        )
    dtype = numpy_dtype(datatype)
    if datatype == "BOOL":
        return rng.integers(0, 2, size=shape).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -INT_BOUND), min(info.max, INT_BOUND), size=shape, endpoint=True).astype(
            dtype
        )
    return rng.random(size=shape).astype(dtype)


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


@asynccontextmanager
async def temporary_version(
    server: InferenceServer, config: ModelConfig, served: ServedVersion
) -> AsyncIterator[ServedVersion]:
    """`config` loaded on the files of the served version `served`, outside the model manager (no request reaches
    it), unloaded on the way out."""
    temporary = ServedVersion(config, TEMPORARY_VERSION, served.path)
    await temporary.load(server.manager.gpus, server.model_services)
    try:
        yield temporary
    finally:
        await temporary.unload()


async def measure(
    server: InferenceServer,
    temporary: ServedVersion,
    inputs: dict[str, np.ndarray],
    batch: int,
    concurrency: int,
    seconds: float,
    candidate: int = 0,
    stop: asyncio.Event | None = None,
) -> LoadPoint:
    """`concurrency` callers on `temporary` for `seconds` (or until `stop` is set), each sending its next request
    when its last one is answered."""
    latencies: list[float] = []
    failures: list[str] = []
    name = temporary.name
    before = (temporary.stats.inference_count, temporary.stats.execution_count, _client_requests(server, name))
    started = time.perf_counter()
    deadline = started + seconds

    async def caller() -> None:
        while time.perf_counter() < deadline and not (stop is not None and stop.is_set()):
            sent = time.perf_counter()
            try:
                await temporary.infer(_request(temporary, inputs, batch))
            except InferaError as exc:
                failures.append(exc.message)
                continue
            latencies.append(time.perf_counter() - sent)

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    inferences = temporary.stats.inference_count - before[0]
    executions = temporary.stats.execution_count - before[1]
    millis = np.array(latencies) * 1000.0
    return LoadPoint(
        candidate=candidate,
        concurrency=concurrency,
        requests=len(latencies),
        failures=len(failures),
        seconds=round(elapsed, 4),
        throughput=len(latencies) * batch / elapsed if elapsed > 0 else 0.0,
        p50_ms=float(np.percentile(millis, 50)) if latencies else None,
        p99_ms=float(np.percentile(millis, 99)) if latencies else None,
        mean_batch=inferences / executions if executions else 0.0,
        client_requests=_client_requests(server, name) - before[2],
        error=failures[0] if failures else "",
    )


async def warm_up(temporary: ServedVersion, inputs: dict[str, np.ndarray], batch: int, concurrency: int) -> None:
    """One round of `concurrency` requests at once, unmeasured: every instance has run before the first point."""
    await asyncio.gather(*(temporary.infer(_request(temporary, inputs, batch)) for _ in range(concurrency)))


def _request(temporary: ServedVersion, inputs: dict[str, np.ndarray], batch: int) -> InferenceRequest:
    return InferenceRequest(temporary.name, dict(inputs), TEMPORARY_VERSION, batch_size=batch, protocol="analysis")


def _client_requests(server: InferenceServer, name: str) -> int:
    """Requests the served versions of `name` have answered so far (the temporary versions are not among them)."""
    entry = server.manager.models.get(name)
    return sum(served.stats.success.count for served in entry.versions.values()) if entry is not None else 0


async def sweep(
    server: InferenceServer,
    name: str,
    version: int,
    candidates: list[Candidate],
    levels: list[int],
    seconds: float,
    *,
    caller: Principal,
    sample: dict[str, Any] | None = None,
    on_point: Callable[[LoadPoint], Awaitable[None]] | None = None,
    cancelled: asyncio.Event | None = None,
) -> list[LoadPoint]:
    """Measure every candidate at every level on temporary versions of the served version `version` of `name`.

    Raises InvalidArgument (a candidate or the sample does not fit), CodeRefused (the caller may not load this
    model's code) or LoadError; stops early, with the points so far, once `cancelled` is set.
    """
    served = server.get_model(name, version)
    base = served.config
    configs = [candidate_config(base, c, server.settings.limits) for c in candidates]
    for config in configs:
        admission.check_code(config, caller, server.settings)
    inputs, batch = analysis_inputs(base, sample)
    stop = cancelled or asyncio.Event()
    points: list[LoadPoint] = []
    for index, config in enumerate(configs):
        if stop.is_set():
            break
        async with temporary_version(server, config, served) as temporary:
            await warm_up(temporary, inputs, batch, max(levels))
            for level in levels:
                if stop.is_set():
                    break
                point = await measure(server, temporary, inputs, batch, level, seconds, index, stop)
                points.append(point)
                if on_point is not None:
                    await on_point(point)
    return points


__all__ = [
    "TEMPORARY_VERSION",
    "Candidate",
    "LoadPoint",
    "analysis_inputs",
    "candidate_config",
    "concurrency_levels",
    "grid_candidates",
    "sweep",
]
