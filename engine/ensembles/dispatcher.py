"""Triton's ensemble scheduler: a model whose `ensemble_scheduling.step`s pass tensors from model to model.

`EnsemblePlan` reads and checks the steps on their own (every tensor produced once, read only once produced, no
cycle, every output produced) and against the composing models' configs (loaded, types and shapes that can
match, batch sizes); `EnsembleDispatcher` runs one request: a step starts as soon as all its inputs exist, so
independent branches run at once, and each step is an ordinary request to its model, batched there with
everyone else's. Decoupled steps make the ensemble stream, as in Triton (engine.ensembles.streams).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import numpy as np

from engine.config.model_config import ModelConfig, TensorConfig
from engine.ensembles.streams import Labels, StreamedEnsemble, label_steps
from engine.errors import BackendError, InferaError, InvalidArgument
from engine.schedulers.dispatcher import Dispatcher
from engine.serving.stats import ModelStats
from engine.serving.streams import ResponseStream, StreamStats
from engine.types import InferenceRequest, InferenceResponse

Infer = Callable[[InferenceRequest], Awaitable[InferenceResponse]]
InferStream = Callable[[InferenceRequest], Awaitable[ResponseStream]]
ConfigOf = Callable[[str, int | None], ModelConfig]
StepRunner = Callable[["EnsembleStep", InferenceRequest, dict[str, np.ndarray]], Awaitable[dict[str, np.ndarray]]]


@dataclass(frozen=True)
class EnsembleStep:
    """One step: the model it calls and how its tensors map to the ensemble's (model name -> ensemble name)."""

    index: int
    model_name: str
    model_version: int  # -1: the version the model serves
    input_map: dict[str, str]
    output_map: dict[str, str]

    @property
    def label(self) -> str:
        return f"step {self.index} ('{self.model_name}')"


class EnsemblePlan:
    """An ensemble's steps, checked: who produces each tensor, and in which order steps may run."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.name = config.name
        raw = (config.ensemble_scheduling or {}).get("step") or []
        prefix = f"ensemble '{config.name}'"
        if not raw:
            raise InvalidArgument(f"{prefix}: ensemble_scheduling has no step")
        self.steps = [
            EnsembleStep(
                index,
                str(step.get("model_name", "")),
                int(step.get("model_version", -1)),
                dict(step.get("input_map", {})),
                dict(step.get("output_map", {})),
            )
            for index, step in enumerate(raw)
        ]
        self.inputs = {t.name for t in config.input}
        self.producer: dict[str, EnsembleStep] = {}
        for step in self.steps:
            if not step.model_name:
                raise InvalidArgument(f"{prefix}: step {step.index} names no model")
            if not step.output_map:
                raise InvalidArgument(f"{prefix}: {step.label} has no output_map")
            for tensor in step.output_map.values():
                if tensor in self.inputs:
                    raise InvalidArgument(f"{prefix}: {step.label} produces '{tensor}', which is an ensemble input")
                if tensor in self.producer:
                    raise InvalidArgument(
                        f"{prefix}: tensor '{tensor}' is produced twice, by {self.producer[tensor].label} and "
                        f"{step.label}"
                    )
                self.producer[tensor] = step
        for step in self.steps:
            for model_input, tensor in step.input_map.items():
                if tensor not in self.inputs and tensor not in self.producer:
                    raise InvalidArgument(
                        f"{prefix}: {step.label} reads '{tensor}' (for its input '{model_input}'), which no step "
                        "produces and which is not an ensemble input"
                    )
        for output in config.output:
            if output.name not in self.producer:
                raise InvalidArgument(f"{prefix}: ensemble output '{output.name}' is produced by no step")
        self.order = self._order(prefix)

    def models(self) -> list[str]:
        """The composing models, in step order, once each."""
        return list(dict.fromkeys(step.model_name for step in self.steps))

    def problem(self, config_of: ConfigOf) -> str | None:
        """Why the ensemble cannot serve with the models loaded now (a missing model, a type or shape that
        cannot match), or None."""
        prefix = f"ensemble '{self.name}'"
        types: dict[str, TensorConfig] = {t.name: t for t in self.config.input}
        for step in self.order:
            version = step.model_version if step.model_version > 0 else None
            try:
                model = config_of(step.model_name, version)
            except InferaError:
                wanted = f"version {version} of " if version else ""
                return f"{prefix}: {step.label} needs {wanted}model '{step.model_name}', which is not loaded"
            if self.config.max_batch_size > model.max_batch_size:
                return (
                    f"{prefix}: max_batch_size {self.config.max_batch_size} is over the max_batch_size "
                    f"{model.max_batch_size} of '{step.model_name}' ({step.label})"
                )
            for model_input, tensor in step.input_map.items():
                wanted = model.input_named(model_input)
                if wanted is None:
                    return f"{prefix}: {step.label}: model '{step.model_name}' has no input '{model_input}'"
                given = types.get(tensor)
                if given is not None and (clash := _clash(given, wanted)):
                    return f"{prefix}: {step.label}: tensor '{tensor}' for input '{model_input}' {clash}"
            for model_output, tensor in step.output_map.items():
                produced = model.output_named(model_output)
                if produced is None:
                    return f"{prefix}: {step.label}: model '{step.model_name}' has no output '{model_output}'"
                types[tensor] = produced
        for output in self.config.output:
            if clash := _clash(types[output.name], output):
                return f"{prefix}: ensemble output '{output.name}' {clash}"
        labels = label_steps(self, self.decoupled_steps(config_of))
        return labels if isinstance(labels, str) else None

    def decoupled_steps(self, config_of: ConfigOf) -> set[int]:
        """The steps whose model is decoupled (among those loaded now)."""
        found = set()
        for step in self.steps:
            try:
                config = config_of(step.model_name, step.model_version if step.model_version > 0 else None)
            except InferaError:
                continue
            if config.decoupled:
                found.add(step.index)
        return found

    def labels(self, config_of: ConfigOf) -> Labels | None:
        """Where each step's inputs come from when some step is decoupled (the ensemble then streams), else None."""
        decoupled = self.decoupled_steps(config_of)
        labels = label_steps(self, decoupled) if decoupled else None
        return labels if isinstance(labels, Labels) else None

    def _order(self, prefix: str) -> list[EnsembleStep]:
        """The steps in an order where each runs after the steps producing its inputs; InvalidArgument on a cycle."""
        available = set(self.inputs)
        order: list[EnsembleStep] = []
        left = list(self.steps)
        while left:
            ready = [s for s in left if all(t in available for t in s.input_map.values())]
            if not ready:
                names = ", ".join(s.label for s in left)
                raise InvalidArgument(f"{prefix}: the steps form a cycle: {names} wait for each other's outputs")
            for step in ready:
                available.update(step.output_map.values())
                left.remove(step)
                order.append(step)
        return order


def step_models(config: ModelConfig) -> list[str]:
    """The models an ensemble's steps name, once each, read without checking the steps (none for other models)."""
    if config.backend_name != "ensemble":
        return []
    raw = (config.ensemble_scheduling or {}).get("step") or []
    return list(dict.fromkeys(str(s["model_name"]) for s in raw if isinstance(s, dict) and s.get("model_name")))


def ensemble_cycle(start: str, calls: Callable[[str], Iterable[str]]) -> list[str] | None:
    """A chain of ensemble calls from `start` back to itself (`[start, ..., start]`), or None.

    `calls(name)` names the models the ensemble `name` calls (nothing for a model that is no ensemble). Only cycles
    through `start` count: one further down is the problem of its own members, refused when they load.
    """
    path, seen = [start], {start}
    stack = [iter(calls(start))]
    while stack:
        for model in stack[-1]:
            if model == start:
                return [*path, start]
            if model not in seen:
                seen.add(model)
                path.append(model)
                stack.append(iter(calls(model)))
                break
        else:
            stack.pop()
            path.pop()
    return None


def cycle_error(path: list[str]) -> InvalidArgument:
    """The refusal of an ensemble that would call itself, naming the chain."""
    chain = " -> ".join(f"'{name}'" for name in path)
    return InvalidArgument(
        f"ensemble {chain} is a cycle: an ensemble may not call itself, directly or through other ensembles"
    )


def _collect(step: EnsembleStep, outputs: dict[str, np.ndarray], tensors: dict[str, np.ndarray]) -> None:
    """A step's outputs under their ensemble names (a decoupled step's go to scopes of their own instead)."""
    for model_output, tensor in step.output_map.items():
        if model_output in outputs:
            tensors[tensor] = outputs[model_output]


def _clash(given: TensorConfig, wanted: TensorConfig) -> str | None:
    """Why a tensor of `given`'s type and dims cannot feed one declared as `wanted`, or None."""
    if given.data_type != wanted.data_type:
        return f"is {given.data_type}, the input takes {wanted.data_type}"
    dims, other = list(given.dims), list(wanted.dims)
    if len(dims) != len(other) or any(a != b and -1 not in (a, b) for a, b in zip(dims, other, strict=True)):
        return f"has dims {dims}, the input takes {other}"
    return None


class EnsembleDispatcher(Dispatcher):
    """Runs an ensemble's requests: each step an ordinary request to its model, steps at once where they can.

    With `labels` (some step is decoupled, engine.ensembles.streams) a request is a stream: the ensemble answers
    once per complete set of outputs, each decoupled step's every response running the steps after it."""

    composes = True
    queued = 0  # its requests queue on its steps' models

    def __init__(
        self,
        plan: EnsemblePlan,
        version: int,
        infer: Infer,
        stats: ModelStats,
        infer_stream: InferStream | None = None,
        labels: Labels | None = None,
    ) -> None:
        self.plan = plan
        self.name = plan.name
        self.version = version
        self.infer = infer
        self.infer_stream = infer_stream
        self.labels = labels
        self.stats = stats
        self.step_seconds: list[tuple[int, float, float]] = []  # (step, start, end) of recent runs, for tests
        self._streaming: set[asyncio.Task] = set()

    def recheck(self, config_of: ConfigOf) -> str | None:
        """Why the ensemble cannot serve with the models loaded now, or None; then it streams (is decoupled, as
        Triton sets its transaction policy) when one of its steps is."""
        problem = self.plan.problem(config_of)
        if problem is None:
            self.labels = self.plan.labels(config_of)
            self.plan.config.decoupled = self.labels is not None
            if self.labels is not None and self.stats.streams is None:
                self.stats.streams = StreamStats()
        return problem

    def start(self) -> None:
        """Nothing to start: steps run on their models' own schedulers."""

    async def stop(self) -> None:
        """Nothing to stop: an ensemble's requests finish on their models."""

    async def submit(self, request: InferenceRequest) -> InferenceResponse:
        if self.labels is not None and request.stream is not None:
            # the responses go to the request's stream as they are made; this answer says only that it started
            task = asyncio.ensure_future(StreamedEnsemble(self, request, self.labels).run())
            self._streaming.add(task)
            task.add_done_callback(self._streaming.discard)
            return InferenceResponse(model_name=self.name, model_version=self.version, outputs={}, id=request.id)
        started = time.monotonic_ns()
        try:
            tensors = await self.run_steps(request, dict(request.inputs), self.plan.steps, self.call_step)
        except InferaError:
            self.stats.record_failure(time.monotonic_ns() - started, request.protocol)
            raise
        outputs = {t.name: tensors[t.name] for t in self.plan.config.output}
        done = time.monotonic_ns()
        self.stats.record_success(done - started, 0, done, request.protocol)
        self.stats.inference_count += request.batch_size
        self.stats.execution_count += 1
        return InferenceResponse(model_name=self.name, model_version=self.version, outputs=outputs, id=request.id)

    async def run_steps(
        self,
        request: InferenceRequest,
        tensors: dict[str, np.ndarray],
        steps: list[EnsembleStep],
        run_step: StepRunner,
    ) -> dict[str, np.ndarray]:
        """Run `steps`, each once its inputs are in `tensors` (which collects their outputs), branches at once."""
        waiting = list(steps)
        running: dict[asyncio.Task, EnsembleStep] = {}
        try:
            while waiting or running:
                ready = [s for s in waiting if all(t in tensors for t in s.input_map.values())]
                if len(ready) == 1 and not running:
                    # a chain: the one step that can run is awaited directly, without a task to schedule
                    step = ready[0]
                    waiting.remove(step)
                    outputs = await run_step(step, request, tensors)
                    _collect(step, outputs, tensors)
                    continue
                for step in ready:
                    waiting.remove(step)
                    task = asyncio.ensure_future(run_step(step, request, tensors))
                    running[task] = step
                if not running:
                    raise InvalidArgument(f"ensemble '{self.name}': no step can run with the given inputs")
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    step = running.pop(task)
                    _collect(step, task.result(), tensors)
        finally:
            for task in running:
                task.cancel()
        return tensors

    def step_request(
        self, step: EnsembleStep, request: InferenceRequest, tensors: dict[str, np.ndarray]
    ) -> InferenceRequest:
        """The ordinary request a step makes to its model."""
        return InferenceRequest(
            model_name=step.model_name,
            inputs={model_input: tensors[tensor] for model_input, tensor in step.input_map.items()},
            model_version=step.model_version if step.model_version > 0 else None,
            id=request.id,
            parameters=dict(request.parameters),
            priority=request.priority,
            timeout_us=request.timeout_us,
            batch_size=request.batch_size,
            protocol="ensemble",
        )

    async def call_step(
        self, step: EnsembleStep, request: InferenceRequest, tensors: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        began = time.monotonic()
        try:
            response = await self.infer(self.step_request(step, request, tensors))
        except InferaError as exc:
            raise self.step_error(step, exc) from None
        self._remember(step.index, began, time.monotonic())
        self.check_outputs(step, response.outputs)
        return response.outputs

    def step_error(self, step: EnsembleStep, exc: InferaError) -> InferaError:
        """`exc` as the ensemble's error, naming the step."""
        return type(exc)(f"in ensemble '{self.name}', {step.label}: {exc.message}")

    def check_outputs(self, step: EnsembleStep, outputs: dict[str, np.ndarray]) -> None:
        missing = [name for name in step.output_map if name not in outputs]
        if missing:
            raise BackendError(f"in ensemble '{self.name}', {step.label}: the model gave no output '{missing[0]}'")

    def _remember(self, index: int, began: float, ended: float) -> None:
        self.step_seconds.append((index, began, ended))
        del self.step_seconds[:-256]
