"""An ensemble's plan: the `ensemble_scheduling.step`s of a model that passes tensors from model to model, checked.

`EnsemblePlan` reads and checks the steps on their own (every tensor produced once, read only once produced, no
cycle, every output produced) and against the composing models' configs (loaded, types and shapes that can
match, batch sizes); a cycle across ensembles is found before a load (`ensemble_cycle`).

Decoupled steps make the ensemble stream, as in Triton. Triton's rule (core's ensemble_utils.cc): every tensor
carries a label, the decoupled step whose responses it came from (0: the request, through ordinary steps). A step's
inputs, and the ensemble's outputs, must share one label, or the ensemble does not load ("receives inputs
originated from different decoupled models"); `label_steps` gives the labels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from engine.config.model_config import ModelConfig, TensorConfig
from engine.errors import InferaError, InvalidArgument

ConfigOf = Callable[[str, int | None], ModelConfig]


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
        self._needed: dict[frozenset[str], list[EnsembleStep]] = {}  # steps_for, by the outputs asked for

    def steps_for(self, outputs: Iterable[str]) -> list[EnsembleStep]:
        """The steps that `outputs` need, in step order: Triton prunes an ensemble to the steps whose outputs a
        requested output depends on (core's EnsembleContext), so a step no requested output needs never runs."""
        wanted = frozenset(outputs)
        found = self._needed.get(wanted)
        if found is None:
            needed = set(wanted)
            kept: set[int] = set()
            for step in reversed(self.order):
                if needed.intersection(step.output_map.values()):
                    kept.add(step.index)
                    needed.update(step.input_map.values())
            found = [step for step in self.steps if step.index in kept]
            if len(self._needed) < 64:  # the subsets asked for most; any other is worked out again
                self._needed[wanted] = found
        return found

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


def _clash(given: TensorConfig, wanted: TensorConfig) -> str | None:
    """Why a tensor of `given`'s type and dims cannot feed one declared as `wanted`, or None."""
    if given.data_type != wanted.data_type:
        return f"is {given.data_type}, the input takes {wanted.data_type}"
    dims, other = list(given.dims), list(wanted.dims)
    if len(dims) != len(other) or any(a != b and -1 not in (a, b) for a, b in zip(dims, other, strict=True)):
        return f"has dims {dims}, the input takes {other}"
    return None


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
