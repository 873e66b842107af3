"""Traffic policies across a model's versions: all to the active one, a weighted canary, or shadow copies.

A request that names a version always gets that version; the policy decides only for the rest. A canary splits them
by weight (sticky per client key when the request carries one, so one user does not flip between versions); a
shadow answers from the active version and runs a sampled share of copies on the candidate, whose answers are
compared with the active one's and thrown away. A guard can roll a canary or a shadow back to the active version
when the candidate's error rate or p99 latency over a window crosses a threshold.

A decoupled model's streams follow a canary too (the guard counts a stream that ends in an error as failed and times
its first response, the stream's latency); a shadow is refused for them, having no one answer to compare.

A policy's versions must take the active version's requests and give its answers: the same inputs and outputs
(names, datatypes, and shapes as a client sees them, batch dimension included, where -1 matches any size).
"""

from __future__ import annotations

import hashlib
import math
import random
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.config.model_config import ModelConfig, TensorConfig
from engine.errors import IncompatibleVersion, InvalidArgument

MODES = ("active", "canary", "shadow")
MAX_WEIGHT = 100.0  # a canary's weights are shares of 0 to 100 ({"1": 90, "2": 10}; {"1": 0.9, "2": 0.1} works too)
MAX_WINDOW_SECONDS = 86_400.0  # the rollback guard's window: a day at most
MAX_MIN_REQUESTS = 1_000_000
STICKY_PARAMETER = "sticky_key"  # the request parameter that keeps one client on one version
SAMPLED_DISAGREEMENTS = 20


@dataclass(frozen=True)
class TrafficPolicy:
    """How requests that name no version are shared among a model's versions (see the module's docstring)."""

    mode: str = "active"
    weights: dict[int, float] = field(default_factory=dict)  # canary: version -> weight
    candidate: int | None = None  # shadow: the version that runs the copies
    shadow_share: float = 1.0  # shadow: the share of requests copied
    rollback_error_rate: float | None = None  # roll back when the candidate's failures pass this share
    rollback_p99_ms: float | None = None  # or its p99 latency passes this many milliseconds
    rollback_window_seconds: float = 60.0
    rollback_min_requests: int = 20

    def versions(self) -> set[int]:
        """The versions this policy sends requests to (besides the active one)."""
        if self.mode == "canary":
            return set(self.weights)
        if self.mode == "shadow" and self.candidate is not None:
            return {self.candidate}
        return set()

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "weights": {str(version): weight for version, weight in sorted(self.weights.items())},
            "candidate": self.candidate,
            "shadow_share": self.shadow_share,
            "rollback_error_rate": self.rollback_error_rate,
            "rollback_p99_ms": self.rollback_p99_ms,
            "rollback_window_seconds": self.rollback_window_seconds,
            "rollback_min_requests": self.rollback_min_requests,
        }


def policy_from_dict(data: dict[str, Any]) -> TrafficPolicy:
    """A policy from its JSON form; InvalidArgument naming the field otherwise."""
    if not isinstance(data, dict):
        raise InvalidArgument("a traffic policy is a JSON object")
    known = set(TrafficPolicy.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise InvalidArgument(f"unknown traffic policy field(s): {', '.join(unknown)}")
    try:
        weights = {int(version): float(weight) for version, weight in (data.get("weights") or {}).items()}
        candidate = data.get("candidate")
        policy = TrafficPolicy(
            mode=str(data.get("mode", "active")),
            weights=weights,
            candidate=int(candidate) if candidate is not None else None,
            shadow_share=float(data.get("shadow_share", 1.0)),
            rollback_error_rate=_optional_float(data.get("rollback_error_rate")),
            rollback_p99_ms=_optional_float(data.get("rollback_p99_ms")),
            rollback_window_seconds=float(data.get("rollback_window_seconds", 60.0)),
            rollback_min_requests=int(data.get("rollback_min_requests", 20)),
        )
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgument(f"traffic policy: {exc}") from None
    check_values(policy)
    return policy


def check_values(policy: TrafficPolicy, prefix: str = "traffic policy") -> None:
    """InvalidArgument naming the field when a number of the policy is out of its range (or not finite: 1e308, inf,
    nan weights once made every canary draw nonsense)."""
    for version, weight in policy.weights.items():
        if not (math.isfinite(weight) and 0 <= weight <= MAX_WEIGHT):
            raise InvalidArgument(
                f"{prefix}: the weight of version {version} must be from 0 to {MAX_WEIGHT:g}, got {weight}"
            )
        if version < 1:
            raise InvalidArgument(f"{prefix}: weights name versions, numbered from 1; got {version}")
    if not (math.isfinite(policy.shadow_share) and 0 < policy.shadow_share <= 1):
        raise InvalidArgument(f"{prefix}: shadow_share must be in (0, 1], got {policy.shadow_share}")
    rate = policy.rollback_error_rate
    if rate is not None and not (math.isfinite(rate) and 0 <= rate <= 1):
        raise InvalidArgument(f"{prefix}: rollback_error_rate must be in [0, 1], got {rate}")
    p99 = policy.rollback_p99_ms
    if p99 is not None and not (math.isfinite(p99) and p99 >= 0):
        raise InvalidArgument(f"{prefix}: rollback_p99_ms must be a number of milliseconds, 0 or more, got {p99}")
    window = policy.rollback_window_seconds
    if not (math.isfinite(window) and 0 < window <= MAX_WINDOW_SECONDS):
        raise InvalidArgument(
            f"{prefix}: rollback_window_seconds must be over 0 and at most {MAX_WINDOW_SECONDS:g}, got {window}"
        )
    if not 1 <= policy.rollback_min_requests <= MAX_MIN_REQUESTS:
        raise InvalidArgument(
            f"{prefix}: rollback_min_requests must be from 1 to {MAX_MIN_REQUESTS}, got {policy.rollback_min_requests}"
        )


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def check_policy(
    model: str,
    policy: TrafficPolicy,
    ready: set[int],
    active: int | None,
    *,
    decoupled: bool = False,
    configs: dict[int, ModelConfig] | None = None,
) -> None:
    """InvalidArgument when the policy cannot apply to the versions that are READY now (or, `decoupled`, to a model
    that streams its responses: a canary splits streams, a shadow has no one answer to compare); with the versions'
    `configs`, IncompatibleVersion when one of its versions' inputs or outputs differ from the active version's."""
    prefix = f"traffic policy of model '{model}'"
    if policy.mode not in MODES:
        raise InvalidArgument(f"{prefix}: mode must be one of {', '.join(MODES)}, got '{policy.mode}'")
    if policy.mode == "shadow" and decoupled:
        raise InvalidArgument(
            f"{prefix}: a shadow compares each request's one answer from two versions, and '{model}' is decoupled "
            "(it streams any number of responses per request); a canary can split its streams between versions"
        )
    check_values(policy, prefix)
    if policy.mode == "canary":
        if len(policy.weights) < 2:
            raise InvalidArgument(f"{prefix}: a canary needs weights for two or more versions")
        if sum(policy.weights.values()) <= 0:
            raise InvalidArgument(f"{prefix}: weights must not all be zero")
    if policy.mode == "shadow":
        if policy.candidate is None:
            raise InvalidArgument(f"{prefix}: a shadow needs a candidate version")
        if policy.candidate == active:
            raise InvalidArgument(f"{prefix}: the candidate {policy.candidate} is the active version")
    missing = sorted(policy.versions() - ready)
    if missing:
        raise InvalidArgument(f"{prefix}: version {missing[0]} is not READY")
    if configs is not None and active in configs:
        for version in sorted(policy.versions() - {active}):
            if version in configs:
                check_same_tensors(model, configs[active], active, configs[version], version)


def check_same_tensors(model: str, active: ModelConfig, number: int, candidate: ModelConfig, version: int) -> None:
    """IncompatibleVersion naming the first input or output of `candidate` that differs from `active`'s."""
    for kind, theirs, ours in (("input", active.input, candidate.input), ("output", active.output, candidate.output)):
        mine = {tensor.name: tensor for tensor in ours}
        for tensor in theirs:
            other = mine.pop(tensor.name, None)
            difference = _tensor_difference(active, tensor, candidate, other, number)
            if difference is not None:
                raise IncompatibleVersion(model, version, number, kind, tensor.name, difference)
        for name in sorted(mine):
            raise IncompatibleVersion(model, version, number, kind, name, f"is not one of version {number}'s")


def _tensor_difference(
    active: ModelConfig, expected: TensorConfig, candidate: ModelConfig, got: TensorConfig | None, number: int
) -> str | None:
    """What differs between a tensor of the active version and the candidate's of the same name, or None."""
    if got is None:
        return "is missing"
    if got.datatype != expected.datatype:
        return f"has datatype {got.datatype}, version {number}'s {expected.datatype}"
    shape, wanted = client_shape(candidate, got), client_shape(active, expected)
    if len(shape) != len(wanted) or any(a != b and -1 not in (a, b) for a, b in zip(shape, wanted, strict=True)):
        return f"has shape {shape}, version {number}'s {wanted}"
    return None


def client_shape(config: ModelConfig, tensor: TensorConfig) -> list[int]:
    """A tensor's shape as a client sees it: the batch dimension (-1) first when the model batches."""
    return ([-1] if config.max_batch_size > 0 else []) + list(tensor.dims)


class VersionDraw:
    """Draws versions under one policy; `rng` is injectable so tests decide against a fixed sequence."""

    def __init__(self, policy: TrafficPolicy, rng: random.Random | None = None) -> None:
        self.policy = policy
        # traffic shares, not secrets: a seedable generator is what the tests need
        self.rng = rng or random.Random()  # noqa: S311  # nosec B311
        self._versions = sorted(policy.weights)
        total = sum(policy.weights.values()) or 1.0
        running = 0.0
        self._bounds = []
        for version in self._versions:
            running += policy.weights[version] / total
            self._bounds.append(running)

    def choose(self, parameters: Mapping[str, Any], active: int) -> int:
        """The version an unversioned request goes to."""
        if self.policy.mode != "canary":
            return active
        key = parameters.get(STICKY_PARAMETER)
        point = _hashed_point(str(key)) if key not in (None, "") else self.rng.random()
        for version, bound in zip(self._versions, self._bounds, strict=True):
            if point < bound:
                return version
        return self._versions[-1]

    def shadow_target(self) -> int | None:
        """The candidate version a copy of this request also runs on, or None (not shadowing, or not sampled)."""
        if self.policy.mode != "shadow" or self.policy.candidate is None:
            return None
        if self.policy.shadow_share < 1 and self.rng.random() >= self.policy.shadow_share:
            return None
        return self.policy.candidate


def _hashed_point(key: str) -> float:
    """A client key's fixed place in [0, 1): the same key always lands on the same version."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class ShadowComparison:
    """Agreement between the active version's answers and the candidate's, per output, with sampled disagreements."""

    def __init__(self, keep: int = SAMPLED_DISAGREEMENTS) -> None:
        self.counts: dict[str, list[int]] = {}  # output -> [agree, disagree]
        self.max_abs_diff: dict[str, float] = {}
        self.argmax: dict[str, list[int]] = {}  # output -> [agree, disagree] of the arg max per row (floats)
        self.failures = 0  # copies that failed on the candidate
        self.samples: deque[dict[str, Any]] = deque(maxlen=keep)
        self._lock = threading.Lock()

    def compare(
        self, inputs: dict[str, np.ndarray], active: dict[str, np.ndarray], candidate: dict[str, np.ndarray]
    ) -> None:
        with self._lock:
            disagreeing = []
            for name, expected in active.items():
                got = candidate.get(name)
                counts = self.counts.setdefault(name, [0, 0])
                same = got is not None and _agree(expected, got)
                counts[0 if same else 1] += 1
                if not same:
                    disagreeing.append(name)
                if got is not None and expected.dtype.kind == "f" and got.shape == expected.shape:
                    difference = float(np.max(np.abs(expected - got))) if expected.size else 0.0
                    self.max_abs_diff[name] = max(self.max_abs_diff.get(name, 0.0), difference)
                    if expected.ndim >= 2 and expected.size:
                        rows = expected.reshape(expected.shape[0], -1).argmax(axis=1)
                        other = got.reshape(got.shape[0], -1).argmax(axis=1)
                        argmax = self.argmax.setdefault(name, [0, 0])
                        argmax[0] += int((rows == other).sum())
                        argmax[1] += int((rows != other).sum())
            if disagreeing:
                self.samples.append(
                    {
                        "outputs": disagreeing,
                        "inputs": {name: _small(array) for name, array in inputs.items()},
                        "active": {name: _small(active[name]) for name in disagreeing},
                        "candidate": {name: _small(candidate[name]) for name in disagreeing if name in candidate},
                    }
                )

    def failed(self) -> None:
        with self._lock:
            self.failures += 1

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "outputs": {
                    name: {
                        "agree": counts[0],
                        "disagree": counts[1],
                        "max_abs_diff": self.max_abs_diff.get(name),
                        "argmax_agree": self.argmax.get(name, [None, None])[0],
                        "argmax_disagree": self.argmax.get(name, [None, None])[1],
                    }
                    for name, counts in sorted(self.counts.items())
                },
                "candidate_failures": self.failures,
                "disagreements": list(self.samples),
            }


def _agree(expected: np.ndarray, got: np.ndarray, tolerance: float = 1e-5) -> bool:
    """Exact for integers and strings; close (relative and absolute 1e-5) for floats."""
    if expected.shape != got.shape or expected.dtype != got.dtype:
        return False
    if expected.dtype.kind == "f":
        return bool(np.allclose(expected, got, rtol=tolerance, atol=tolerance, equal_nan=True))
    return bool(np.array_equal(expected, got))


def _small(array: np.ndarray, limit: int = 64) -> dict[str, Any]:
    """A sample of an array for a look: its shape and its first values (bytes as text)."""
    flat = array.reshape(-1)[:limit].tolist()
    values = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in flat]
    return {"shape": list(array.shape), "values": values, "truncated": array.size > limit}


class RollbackGuard:
    """Watches a candidate's outcomes over a window; `verdict` says why to roll back, once it should."""

    def __init__(self, policy: TrafficPolicy, clock=time.monotonic) -> None:
        self.policy = policy
        self.clock = clock
        self.outcomes: deque[tuple[float, bool, float]] = deque()  # (when, failed, seconds)
        self._lock = threading.Lock()

    @property
    def armed(self) -> bool:
        return self.policy.rollback_error_rate is not None or self.policy.rollback_p99_ms is not None

    def record(self, failed: bool, seconds: float) -> str | None:
        """Note one candidate outcome; the reason to roll back when a threshold is crossed, else None."""
        if not self.armed:
            return None
        with self._lock:
            now = self.clock()
            self.outcomes.append((now, failed, seconds))
            while self.outcomes and now - self.outcomes[0][0] > self.policy.rollback_window_seconds:
                self.outcomes.popleft()
            if len(self.outcomes) < self.policy.rollback_min_requests:
                return None
            failures = sum(1 for _, failed, _ in self.outcomes if failed)
            rate = failures / len(self.outcomes)
            window = f"{len(self.outcomes)} requests in the last {self.policy.rollback_window_seconds:g} s"
            if self.policy.rollback_error_rate is not None and rate > self.policy.rollback_error_rate:
                return f"the candidate failed {rate:.0%} of {window} (limit {self.policy.rollback_error_rate:.0%})"
            if self.policy.rollback_p99_ms is not None:
                latencies = sorted(seconds for _, failed, seconds in self.outcomes if not failed)
                if latencies:
                    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1000
                    if p99 > self.policy.rollback_p99_ms:
                        limit = self.policy.rollback_p99_ms
                        return f"the candidate's p99 was {p99:.1f} ms over {window} (limit {limit:g} ms)"
            return None


@dataclass
class TrafficState:
    """A model's policy in force, with what carries it out and what it has seen."""

    policy: TrafficPolicy
    router: VersionDraw
    comparison: ShadowComparison = field(default_factory=ShadowComparison)
    guard: RollbackGuard | None = None
    rolled_back: str = ""  # why the guard last put the active version back

    @classmethod
    def of(cls, policy: TrafficPolicy, rng: random.Random | None = None) -> TrafficState:
        return cls(policy, VersionDraw(policy, rng), guard=RollbackGuard(policy))

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.to_dict(),
            "shadow": self.comparison.to_dict() if self.policy.mode == "shadow" or self.comparison.counts else None,
            "rolled_back": self.rolled_back,
        }
