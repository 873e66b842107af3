"""Control tensors and implicit state added to sequence requests, and the next state taken from the outputs."""

from __future__ import annotations

import numpy as np
import pytest

from engine.config.model_config import (
    InitialState,
    ModelConfig,
    SequenceBatching,
    SequenceControl,
    SequenceControlInput,
    SequenceState,
    TensorConfig,
)
from engine.errors import InvalidArgument, LoadError
from engine.schedulers.sequence_inputs import SequenceInputs
from engine.types import InferenceRequest


def config(data_file: str = "", corrid_type: str = "TYPE_UINT64", listed: bool = False) -> ModelConfig:
    initial = InitialState("TYPE_FP32", [2], zero_data=not data_file, data_file=data_file, name="s")
    return ModelConfig(
        name="acc",
        max_batch_size=4,
        output=[TensorConfig("OUT", "TYPE_FP32", [2])] + ([TensorConfig("S_OUT", "TYPE_FP32", [2])] if listed else []),
        sequence_batching=SequenceBatching(
            control_input=[
                SequenceControlInput("START", [SequenceControl("CONTROL_SEQUENCE_START", int32_false_true=[0, 1])]),
                SequenceControlInput("END", [SequenceControl("CONTROL_SEQUENCE_END", fp32_false_true=[0.0, 1.0])]),
                SequenceControlInput(
                    "READY", [SequenceControl("CONTROL_SEQUENCE_READY", bool_false_true=[False, True])]
                ),
                SequenceControlInput("ID", [SequenceControl("CONTROL_SEQUENCE_CORRID", data_type=corrid_type)]),
            ],
            state=[SequenceState("S_IN", "S_OUT", "TYPE_FP32", [2], [initial])],
        ),
    )


def request(sid, start=False, end=False) -> InferenceRequest:
    return InferenceRequest(
        "acc", {"X": np.ones((1, 2), np.float32)}, sequence_id=sid, sequence_start=start, sequence_end=end
    )


def test_it_fills_each_control_with_its_own_type_and_values():
    built = SequenceInputs(config()).build(request(9, start=True), {}, request(9))
    assert built.inputs["START"].tolist() == [[1]] and built.inputs["START"].dtype == np.int32
    assert built.inputs["END"].tolist() == [[0.0]] and built.inputs["END"].dtype == np.float32
    assert built.inputs["READY"].tolist() == [[True]] and built.inputs["READY"].dtype == np.bool_
    assert built.inputs["ID"].tolist() == [[9]] and built.inputs["ID"].dtype == np.uint64
    assert built.inputs["S_IN"].tolist() == [[0.0, 0.0]]


def test_a_filler_is_not_ready_and_has_zero_inputs():
    filler = SequenceInputs(config()).build(None, {}, request(9, start=True))
    assert filler.inputs["READY"].tolist() == [[False]] and filler.inputs["START"].tolist() == [[0]]
    assert filler.inputs["X"].tolist() == [[0.0, 0.0]] and filler.inputs["ID"].tolist() == [[0]]


def test_it_carries_the_state_and_resets_it_at_start():
    inputs = SequenceInputs(config())
    state: dict = {}
    answer = inputs.absorb({"OUT": np.ones((1, 2), np.float32), "S_OUT": np.full((1, 2), 7, np.float32)}, state)
    assert list(answer) == ["OUT"] and state["S_IN"].tolist() == [7.0, 7.0]
    assert inputs.build(request(9), state, request(9)).inputs["S_IN"].tolist() == [[7.0, 7.0]]
    assert inputs.build(request(9, start=True), state, request(9)).inputs["S_IN"].tolist() == [[0.0, 0.0]]


def test_a_state_output_the_config_lists_also_reaches_the_client():
    state: dict = {}
    answer = SequenceInputs(config(listed=True)).absorb({"S_OUT": np.ones((1, 2), np.float32)}, state)
    assert "S_OUT" in answer and "S_IN" in state


def test_it_reads_the_initial_state_from_the_models_initial_state_folder(tmp_path):
    (tmp_path / "acc" / "initial_state").mkdir(parents=True)
    (tmp_path / "acc" / "1").mkdir()
    data = np.array([1.5, 2.5, 99.0], np.float32).tobytes()  # longer than needed: read from its start
    (tmp_path / "acc" / "initial_state" / "start.bin").write_bytes(data)
    inputs = SequenceInputs(config("start.bin"), tmp_path / "acc" / "1")
    assert inputs.build(request(3, start=True), {}, request(3)).inputs["S_IN"].tolist() == [[1.5, 2.5]]


def test_it_refuses_a_missing_or_short_initial_state_file(tmp_path):
    (tmp_path / "acc" / "initial_state").mkdir(parents=True)
    with pytest.raises(LoadError, match="initial_state/missing.bin"):
        SequenceInputs(config("missing.bin"), tmp_path / "acc" / "1")
    (tmp_path / "acc" / "initial_state" / "short.bin").write_bytes(b"\x00" * 4)
    with pytest.raises(LoadError, match="holds 4 bytes"):
        SequenceInputs(config("short.bin"), tmp_path / "acc" / "1")


def test_a_string_id_needs_a_string_corrid():
    with pytest.raises(InvalidArgument, match="CORRID control is UINT64"):
        SequenceInputs(config()).check(request("abc"), "acc")
    built = SequenceInputs(config(corrid_type="TYPE_STRING")).build(request("abc", start=True), {}, request("abc"))
    assert built.inputs["ID"].tolist() == [[b"abc"]]
