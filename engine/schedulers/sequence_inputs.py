"""What the server adds to a sequence request before it runs: control tensors (START, END, READY, CORRID) and the
sequence's implicit state, and what it takes back from the outputs (the next state)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.config.datatypes import config_to_wire, numpy_dtype
from engine.config.model_config import ModelConfig, SequenceState
from engine.errors import InvalidArgument, LoadError
from engine.types import InferenceRequest

START, END, READY, CORRID = (
    "CONTROL_SEQUENCE_START",
    "CONTROL_SEQUENCE_END",
    "CONTROL_SEQUENCE_READY",
    "CONTROL_SEQUENCE_CORRID",
)


@dataclass(frozen=True, slots=True)
class _Control:
    input_name: str
    kind: str
    dtype: np.dtype
    values: tuple  # (false, true) for START, END and READY


class SequenceInputs:
    """Builds the inputs of one model version's sequence requests; `version_path` holds `initial_state/` files."""

    def __init__(self, config: ModelConfig, version_path: Path | None = None) -> None:
        sequencing = config.sequence_batching
        self.batching = config.max_batch_size > 0
        self.controls: list[_Control] = []
        self.states: list[SequenceState] = list(sequencing.state) if sequencing else []
        for control_input in sequencing.control_input if sequencing else []:
            for control in control_input.control:
                self.controls.append(_control(control_input.name, control))
        self.initial = {state.input_name: _initial_value(config.name, state, version_path) for state in self.states}
        self.state_outputs = {state.output_name: state.input_name for state in self.states}
        self.listed_outputs = {tensor.name for tensor in config.output}  # a state output the client may ask for

    def check(self, request: InferenceRequest, model: str) -> None:
        """Refuse a correlation ID the model's CORRID control cannot carry."""
        for control in self.controls:
            if control.kind == CORRID and control.dtype.kind != "O" and isinstance(request.sequence_id, str):
                raise InvalidArgument(
                    f"inference request to model '{model}' has the string correlation ID '{request.sequence_id}', "
                    f"but the model's CORRID control is {control.dtype.name.upper()}"
                )

    def build(
        self, request: InferenceRequest | None, state: dict[str, np.ndarray], like: InferenceRequest
    ) -> InferenceRequest:
        """The request the instance runs: `request` with its controls and its sequence's `state`, or (None) a
        filler for an empty direct slot, shaped like `like`, with READY false."""
        filler = request is None
        base = like if request is None else request
        inputs = {name: np.zeros_like(array) for name, array in base.inputs.items()} if filler else dict(base.inputs)
        start = not filler and base.sequence_start
        flags = {START: start, END: not filler and base.sequence_end, READY: not filler}
        for control in self.controls:
            if control.kind == CORRID:
                inputs[control.input_name] = self._shaped(_corrid(0 if filler else base.sequence_id, control.dtype))
            else:
                value = control.values[int(flags[control.kind])]
                inputs[control.input_name] = self._shaped(np.array([value], control.dtype))
        for spec in self.states:
            fresh = filler or start or spec.input_name not in state
            inputs[spec.input_name] = self._shaped(self.initial[spec.input_name] if fresh else state[spec.input_name])
        return InferenceRequest(
            model_name=base.model_name,
            inputs=inputs,
            model_version=base.model_version,
            id="" if filler else base.id,
            requested_outputs=base.requested_outputs,
            parameters={} if filler else base.parameters,
            sequence_id=0 if filler else base.sequence_id,
            sequence_start=start,
            sequence_end=flags[END],
            batch_size=1,
            protocol=base.protocol,
        )

    def absorb(self, outputs: dict[str, np.ndarray], state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Keep the state outputs as the sequence's next state; the client gets the other outputs."""
        if not self.state_outputs:
            return outputs
        answer = {}
        for name, array in outputs.items():
            input_name = self.state_outputs.get(name)
            if input_name is not None:
                state[input_name] = np.array(array[0] if self.batching else array)
            if input_name is None or name in self.listed_outputs:
                answer[name] = array
        return answer

    def _shaped(self, value: np.ndarray) -> np.ndarray:
        return value[np.newaxis, ...] if self.batching else value


def _control(input_name: str, control) -> _Control:
    if control.kind == CORRID:
        wire = config_to_wire(control.data_type or "TYPE_UINT64")
        return _Control(input_name, CORRID, numpy_dtype(wire), ())
    for values, dtype in (
        (control.int32_false_true, np.int32),
        (control.fp32_false_true, np.float32),
        (control.bool_false_true, np.bool_),
    ):
        if values:
            return _Control(input_name, control.kind, np.dtype(dtype), tuple(values))
    raise LoadError(f"control input '{input_name}': {control.kind} has no false/true values")


def _corrid(value: int | str, dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "O":
        return np.array([str(value).encode()], dtype=object)
    if isinstance(value, str):
        raise ValueError("a string correlation ID for a model whose CORRID control is a number")
    return np.array([value], dtype)


def _initial_value(model: str, state: SequenceState, version_path: Path | None) -> np.ndarray:
    """A sequence's state at START: the config's initial_state (zeros or a file), else zeros of the state's dims."""
    dtype = numpy_dtype(config_to_wire(state.data_type))
    initial = state.initial_state[0] if state.initial_state else None
    dims = [max(d, 1) for d in (initial.dims if initial and initial.dims else state.dims)]
    if initial is None or not initial.data_file:
        return np.zeros(dims, dtype)
    if version_path is None:
        raise LoadError(f"model '{model}': state '{state.input_name}' reads initial_state/{initial.data_file}")
    # Triton reads it from the model folder's `initial_state/`, beside the version folders
    path = Path(version_path).parent / "initial_state" / initial.data_file
    try:
        raw = path.read_bytes()
    except OSError as exc:
        shown = f"initial_state/{initial.data_file}"
        raise LoadError(f"model '{model}': initial state file '{shown}': {exc.strerror}") from None
    expected = int(np.prod(dims)) * dtype.itemsize
    if len(raw) < expected:  # a longer file is read from its start, as Triton does
        raise LoadError(
            f"model '{model}': initial state file 'initial_state/{initial.data_file}' holds {len(raw)} bytes, "
            f"dims {dims} of {state.data_type} need {expected}"
        )
    return np.frombuffer(raw[:expected], dtype).reshape(dims).copy()
