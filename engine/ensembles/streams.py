"""Ensembles with decoupled steps, as Triton runs them: each response of a decoupled step runs the steps after it
once more, and the ensemble answers once per complete set of its outputs, then sends the final flag.

Triton's rule (core's ensemble_utils.cc): every tensor carries a label, the decoupled step whose responses it came
from (0: the request, through ordinary steps). A step's inputs, and the ensemble's outputs, must share one label, or
the ensemble does not load ("receives inputs originated from different decoupled models"). An ensemble with a
decoupled step is decoupled itself, as Triton sets its transaction policy: /infer refuses it, generate_stream and
gRPC streams serve it. `StreamedEnsemble` runs one request as scopes: the request's own (label 0), then one scope
per response of each decoupled step, holding that response's tensors and running the steps of its label.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.errors import InferaError
from engine.serving.streams import ResponseStream, StreamClosed, StreamTimes
from engine.types import InferenceRequest

if TYPE_CHECKING:
    from engine.ensembles.dispatcher import EnsembleDispatcher, EnsemblePlan, EnsembleStep


@dataclass(frozen=True)
class Labels:
    """Where each step's inputs come from: 0 is the request; any other label one decoupled step's responses."""

    of_step: dict[int, int]  # step index -> the label of its inputs
    made_by: dict[int, int]  # step index of a decoupled step -> the label its responses make
    outputs: int  # the label of the ensemble's outputs


def label_steps(plan: EnsemblePlan, decoupled: set[int]) -> Labels | str:
    """The labels of an ensemble whose steps `decoupled` (indices) are decoupled, or Triton's message naming the
    step whose inputs come from different decoupled models."""
    of_tensor = dict.fromkeys(plan.inputs, 0)
    of_step: dict[int, int] = {}
    made_by: dict[int, int] = {}
    for step in plan.order:
        labels = {of_tensor[tensor] for tensor in step.input_map.values()}
        if len(labels) > 1:
            return _mixed(plan.name, step.model_name)
        of_step[step.index] = labels.pop() if labels else 0
        made = of_step[step.index]
        if step.index in decoupled:
            made = made_by[step.index] = len(made_by) + 1
        for tensor in step.output_map.values():
            of_tensor[tensor] = made
    outputs = {of_tensor[output.name] for output in plan.config.output}
    if len(outputs) > 1:
        return _mixed(plan.name, plan.name)
    return Labels(of_step, made_by, outputs.pop())


def _mixed(ensemble: str, model: str) -> str:
    return (
        f"in ensemble '{ensemble}', step of model '{model}' receives inputs originated from different decoupled models"
    )


class StreamedEnsemble:
    """One request through an ensemble with decoupled steps; its responses go to `request.stream`."""

    def __init__(self, dispatcher: EnsembleDispatcher, request: InferenceRequest, labels: Labels) -> None:
        if request.stream is None or dispatcher.infer_stream is None:
            raise TypeError("a streamed ensemble needs the request's stream and the engine's infer_stream")
        self.dispatcher = dispatcher
        self.request = request
        self.stream: ResponseStream = request.stream
        self.labels = labels
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

    async def _scope(self, label: int, tensors: dict[str, np.ndarray]) -> None:
        """Run the steps of `label` on `tensors`; answer when they hold the ensemble's outputs."""
        plan = self.dispatcher.plan
        steps = [step for step in plan.steps if self.labels.of_step[step.index] == label]
        await self.dispatcher.run_steps(self.request, tensors, steps, self._run_step)
        if label == self.labels.outputs and not self.stream.cancelled.is_set():
            self.stream.send({output.name: tensors[output.name] for output in plan.config.output})

    async def _run_step(
        self, step: EnsembleStep, request: InferenceRequest, tensors: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
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
            dispatcher.check_outputs(step, outputs)
            scope = {tensor: outputs[model_output] for model_output, tensor in step.output_map.items()}
            self.scopes.add(asyncio.ensure_future(self._scope(made, scope)))
        return {}

    def _cancel(self) -> None:
        """The client went away (or a step failed): every decoupled step's model is told."""
        for inner in self.inner:
            inner.cancel()
