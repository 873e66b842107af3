"""Triton's ensemble scheduler: an ensemble's requests run as ordinary requests to its steps' models.

`EnsembleDispatcher` runs one request of an `EnsemblePlan` (engine.ensembles.plan): a step starts as soon as all its
inputs exist, so independent branches run at once, and each step is an ordinary request to its model, batched there
with everyone else's.

Decoupled steps make the ensemble stream, as in Triton: each response of a decoupled step runs the steps after it
once more, and the ensemble answers once per complete set of its outputs, then sends the final flag. An ensemble
with a decoupled step is decoupled itself, as Triton sets its transaction policy: /infer refuses it,
generate_stream and gRPC streams serve it. `StreamedEnsemble` runs one such request as scopes: the request's own
(label 0), then one scope per response of each decoupled step, holding that response's tensors and running the
steps of its label.

As in Triton's ensemble scheduler, a request that names its outputs runs only the steps those outputs need
(`EnsemblePlan.steps_for`); an output a step's model leaves out is no error: the steps it feeds run without that
input (theirs to refuse if they need it) and the answer leaves it out (a partial result). Each streamed response
carries the sequence parameters of the request the steps ran for (`sequence_id`, `sequence_start`,
`sequence_end`), as Triton adds them to an ensemble's responses.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable

import numpy as np

from engine.ensembles.plan import ConfigOf, EnsemblePlan, EnsembleStep, Labels
from engine.errors import InferaError, InvalidArgument
from engine.schedulers.dispatcher import Dispatcher
from engine.serving.stats import ModelStats
from engine.serving.streams import ResponseStream, StreamClosed, StreamStats, StreamTimes
from engine.types import InferenceRequest, InferenceResponse

Infer = Callable[[InferenceRequest], Awaitable[InferenceResponse]]
InferStream = Callable[[InferenceRequest], Awaitable[ResponseStream]]
# an ensemble's tensors by name; None: a step's model left that output out (Triton's placeholder for it)
Tensors = dict[str, np.ndarray | None]
StepRunner = Callable[[EnsembleStep, InferenceRequest, Tensors], Awaitable[dict[str, np.ndarray]]]


def _collect(step: EnsembleStep, outputs: dict[str, np.ndarray], tensors: Tensors) -> None:
    """A step's outputs under their ensemble names, None for one its model left out (a decoupled step's go to
    scopes of their own instead, and none of this scope's steps reads them)."""
    for model_output, tensor in step.output_map.items():
        tensors[tensor] = outputs.get(model_output)


def requested_names(plan: EnsemblePlan, request: InferenceRequest) -> list[str]:
    """The ensemble outputs a request asked for, in config order (all of them when it named none)."""
    names = [output.name for output in plan.config.output]
    if not request.requested_outputs:
        return names
    asked = {output.name for output in request.requested_outputs}
    return [name for name in names if name in asked]


def answered(names: list[str], tensors: Tensors) -> dict[str, np.ndarray]:
    """The outputs to answer with: those asked for that the steps made (one a model left out is left out)."""
    return {name: array for name in names if (array := tensors.get(name)) is not None}


class EnsembleDispatcher(Dispatcher):
    """Runs an ensemble's requests: each step an ordinary request to its model, steps at once where they can.

    With `labels` (some step is decoupled: `StreamedEnsemble`) a request is a stream: the ensemble answers
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
        names = requested_names(self.plan, request)
        try:
            tensors = await self.run_steps(request, dict(request.inputs), self.plan.steps_for(names), self.call_step)
        except InferaError:
            self.stats.record_failure(time.monotonic_ns() - started, request.protocol)
            raise
        outputs = answered(names, tensors)
        done = time.monotonic_ns()
        self.stats.record_success(done - started, 0, done, request.protocol)
        self.stats.inference_count += request.batch_size
        self.stats.execution_count += 1
        return InferenceResponse(model_name=self.name, model_version=self.version, outputs=outputs, id=request.id)

    async def run_steps(
        self,
        request: InferenceRequest,
        tensors: Tensors,
        steps: list[EnsembleStep],
        run_step: StepRunner,
    ) -> Tensors:
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

    def step_request(self, step: EnsembleStep, request: InferenceRequest, tensors: Tensors) -> InferenceRequest:
        """The ordinary request a step makes to its model (without an input a model before it left out), with the
        ensemble request's sequence, as Triton's steps carry its correlation id and flags."""
        inputs = {model_input: tensors[tensor] for model_input, tensor in step.input_map.items()}
        return InferenceRequest(
            model_name=step.model_name,
            inputs={name: array for name, array in inputs.items() if array is not None},
            model_version=step.model_version if step.model_version > 0 else None,
            id=request.id,
            parameters=dict(request.parameters),
            priority=request.priority,
            timeout_us=request.timeout_us,
            batch_size=request.batch_size,
            sequence_id=request.sequence_id,
            sequence_start=request.sequence_start,
            sequence_end=request.sequence_end,
            protocol="ensemble",
        )

    async def call_step(self, step: EnsembleStep, request: InferenceRequest, tensors: Tensors) -> dict[str, np.ndarray]:
        began = time.monotonic()
        try:
            response = await self.infer(self.step_request(step, request, tensors))
        except InferaError as exc:
            raise self.step_error(step, exc) from None
        self._remember(step.index, began, time.monotonic())
        return response.outputs

    def step_error(self, step: EnsembleStep, exc: InferaError) -> InferaError:
        """`exc` as the ensemble's error, naming the step."""
        return type(exc)(f"in ensemble '{self.name}', {step.label}: {exc.message}")

    def _remember(self, index: int, began: float, ended: float) -> None:
        self.step_seconds.append((index, began, ended))
        del self.step_seconds[:-256]


class StreamedEnsemble:
    """One request through an ensemble with decoupled steps; its responses go to `request.stream`."""

    def __init__(self, dispatcher: EnsembleDispatcher, request: InferenceRequest, labels: Labels) -> None:
        if request.stream is None or dispatcher.infer_stream is None:
            raise TypeError("a streamed ensemble needs the request's stream and the engine's infer_stream")
        self.dispatcher = dispatcher
        self.request = request
        self.stream: ResponseStream = request.stream
        self.labels = labels
        self.names = requested_names(dispatcher.plan, request)
        self.steps = dispatcher.plan.steps_for(self.names)
        # Triton's ensemble responses: the sequence of the request the steps ran for
        self.sequence = {
            "sequence_id": request.sequence_id,
            "sequence_start": request.sequence_start,
            "sequence_end": request.sequence_end,
        }
        self.scopes: set[asyncio.Task] = set()  # the scopes the decoupled steps' responses started
        self.inner: list[ResponseStream] = []  # the decoupled steps' own streams, cancelled with this one

    async def run(self) -> None:
        stats = self.dispatcher.stats
        if stats.streams is not None:
            stats.streams.opened()
        self.stream.when_final(functools.partial(self._record, time.monotonic_ns()))
        self.stream.on_cancel = self._cancel
        try:
            await self._scope(0, dict(self.request.inputs))
            while self.scopes:
                done, _ = await asyncio.wait(self.scopes, return_when=asyncio.FIRST_EXCEPTION)
                for task in done:
                    self.scopes.discard(task)
                    task.result()  # a step's failure ends the whole stream
        except InferaError as exc:
            for task in self.scopes:
                task.cancel()
            self._cancel()
            self.stream.fail(exc)
            return
        with contextlib.suppress(StreamClosed):
            self.stream.send(final=True)

    def _record(self, started_ns: int, times: StreamTimes) -> None:
        """The stream's final response: the ensemble's statistics, as a decoupled model's are kept."""
        stats = self.dispatcher.stats
        duration = times.ended_ns - started_ns
        if times.failed:
            stats.record_failure(duration, self.request.protocol)
        else:
            stats.record_success(duration, 0, times.ended_ns, self.request.protocol)
            stats.inference_count += self.request.batch_size
            stats.execution_count += 1
        if stats.streams is not None:
            stats.streams.closed(times)

    async def _scope(self, label: int, tensors: Tensors) -> None:
        """Run the steps of `label` (those the requested outputs need) on `tensors`; answer when they hold the
        ensemble's outputs."""
        steps = [step for step in self.steps if self.labels.of_step[step.index] == label]
        await self.dispatcher.run_steps(self.request, tensors, steps, self._run_step)
        if label == self.labels.outputs and not self.stream.cancelled.is_set():
            self.stream.send(answered(self.names, tensors), parameters=self.sequence)

    async def _run_step(self, step: EnsembleStep, request: InferenceRequest, tensors: Tensors) -> dict[str, np.ndarray]:
        made = self.labels.made_by.get(step.index)
        if made is None:
            return await self.dispatcher.call_step(step, request, tensors)
        # a decoupled step: each response starts a scope of its own; nothing comes back into this one
        dispatcher = self.dispatcher
        try:
            inner = await dispatcher.infer_stream(dispatcher.step_request(step, request, tensors))
        except InferaError as exc:
            raise dispatcher.step_error(step, exc) from None
        self.inner.append(inner)
        if self.stream.cancelled.is_set():
            inner.cancel()
        async for response in inner:
            if response.error is not None:
                raise dispatcher.step_error(step, response.error)
            if response.empty:
                continue
            outputs = response.outputs or {}
            scope = {tensor: outputs.get(model_output) for model_output, tensor in step.output_map.items()}
            self.scopes.add(asyncio.ensure_future(self._scope(made, scope)))
        return {}

    def _cancel(self) -> None:
        """The client went away (or a step failed): every decoupled step's model is told."""
        for inner in self.inner:
            inner.cancel()
