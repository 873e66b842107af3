"""validate_config: a valid config passes, and each invalid field is reported by model and field name."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine.config.model_config import (
    DynamicBatching,
    InitialState,
    InstanceGroup,
    ModelConfig,
    ModelWarmup,
    QueuePolicy,
    SequenceBatching,
    SequenceControl,
    SequenceState,
    TensorConfig,
    VersionPolicy,
    WarmupInput,
)
from engine.config.validate import validate_config
from engine.errors import InvalidArgument
from tests.engine.model_factory import every_sequence_control


def valid_config() -> ModelConfig:
    return ModelConfig(
        name="simple",
        backend="onnxruntime",
        max_batch_size=8,
        input=[TensorConfig("INPUT0", "TYPE_FP32", [16]), TensorConfig("INPUT1", "TYPE_STRING", [-1])],
        output=[TensorConfig("OUTPUT0", "TYPE_FP32", [4, 4], reshape=[16])],
        instance_group=[InstanceGroup(count=2, kind="KIND_GPU", gpus=[0]), InstanceGroup(kind="KIND_CPU")],
        dynamic_batching=DynamicBatching(
            preferred_batch_size=[4, 8],
            priority_levels=2,
            default_priority_level=2,
            priority_queue_policy={1: QueuePolicy(timeout_action="DELAY")},
        ),
        version_policy=VersionPolicy(kind="specific", versions=[1, 2]),
        model_warmup=[ModelWarmup(name="w", batch_size=8, inputs={"INPUT0": WarmupInput("TYPE_FP32", [16], True)})],
    )


def test_it_accepts_a_valid_config() -> None:
    validate_config(valid_config())


def test_it_accepts_triton_reshapes() -> None:
    config = valid_config()
    config.input = [
        TensorConfig("A", "TYPE_FP32", [2, 4, -1, 6], reshape=[8, -1, 1, 6]),
        TensorConfig("B", "TYPE_FP32", [1], reshape=[]),
        TensorConfig("C", "TYPE_FP32", [], reshape=None),  # one scalar per batch item
    ]
    config.model_warmup = []
    validate_config(config)


def _set(path: str, value: object) -> Callable[[ModelConfig], None]:
    """A change that sets one attribute path (a.b.0.c) of the valid config."""

    def change(config: ModelConfig) -> None:
        *parents, last = path.split(".")
        target: object = config
        for part in parents:
            target = target[int(part)] if part.isdigit() else getattr(target, part)  # type: ignore[index]
        setattr(target, last, value)

    return change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_set("name", ""), "model name '' is invalid"),
        (_set("name", "a/b"), "model name 'a/b' is invalid"),
        (_set("name", ".hidden"), "model name '.hidden' is invalid"),
        (_set("max_batch_size", -1), "model 'simple': max_batch_size must be 0 or more, got -1"),
        (_set("input.0.dims", [0]), "model 'simple': input 'INPUT0': dims must be positive or -1, got [0]"),
        (_set("input.0.dims", [4, -2]), "input 'INPUT0': dims must be positive or -1, got [4, -2]"),
        (_set("output.0.dims", [0, 16]), "model 'simple': output 'OUTPUT0': dims must be positive or -1"),
        (_set("input.0.data_type", "TYPE_FLOAT"), "input 'INPUT0': unknown data_type 'TYPE_FLOAT'"),
        (_set("input.0.data_type", "TYPE_INVALID"), "input 'INPUT0': must specify 'data_type'"),
        (_set("input.1.name", "INPUT0"), "model 'simple': input 'INPUT0' is declared more than once"),
        (_set("input.1.name", ""), "model 'simple': input 1 must specify 'name'"),
        (_set("output.0.reshape", [15]), "output 'OUTPUT0': reshape [15] does not hold the same elements"),
        (_set("output.0.reshape", [4, -1]), "different numbers of -1 dimensions"),
        (_set("output.0.reshape", [0, 16]), "output 'OUTPUT0': reshape must be positive or -1"),
        (_set("output.0.reshape", []), "an empty reshape needs dims with one element, got [4, 4]"),
        (_set("instance_group.0.kind", "KIND_TPU"), "instance_group 0: unknown kind 'KIND_TPU'"),
        (_set("instance_group.1.count", 0), "instance_group 1: count must be 1 or more, got 0"),
        (_set("instance_group.1.gpus", [0]), "instance_group 1: kind KIND_CPU cannot list gpus [0]"),
        (_set("instance_group.0.gpus", [-1]), "instance_group 0: gpus must be GPU indexes"),
        (_set("dynamic_batching.preferred_batch_size", [16]), "preferred_batch_size 16 must be between 1 and"),
        (_set("dynamic_batching.preferred_batch_size", [0]), "preferred_batch_size 0 must be between 1 and"),
        (_set("dynamic_batching.default_priority_level", 3), "default_priority_level must be between 1 and"),
        (_set("dynamic_batching.default_priority_level", 0), "default_priority_level must be between 1 and"),
        (_set("dynamic_batching.priority_queue_policy", {3: QueuePolicy()}), "priority_queue_policy key 3"),
        (_set("dynamic_batching.default_queue_policy.timeout_action", "DROP"), "unknown timeout_action 'DROP'"),
        (_set("version_policy.kind", "newest"), "version_policy: unknown kind 'newest'"),
        (_set("version_policy.versions", []), "version_policy: specific must list at least one version"),
        (_set("version_policy.versions", [0, 1]), "specific versions must be 1 or more, got [0, 1]"),
        (_set("version_policy", VersionPolicy(num_versions=0)), "latest num_versions must be 1 or more, got 0"),
        (_set("sequence_batching", SequenceBatching()), "only one of dynamic_batching, sequence_batching"),
        (_set("model_warmup.0.inputs", {"NOPE": WarmupInput("TYPE_FP32", [16], True)}), "input 'NOPE' is not an"),
        (_set("model_warmup.0.batch_size", 9), "model_warmup 'w': batch_size must be between 1 and 8, got 9"),
        (_set("model_warmup.0.count", 0), "model_warmup 'w': count must be 1 or more"),
        (_set("model_warmup.0.name", ""), "model 'simple': model_warmup must specify 'name'"),
        (_set("model_warmup.0.inputs", {}), "model_warmup 'w': must specify 'inputs'"),
        (
            _set("model_warmup.0.inputs", {"INPUT0": WarmupInput("TYPE_INT32", [16], True)}),
            "input 'INPUT0' has data_type TYPE_INT32, the model expects TYPE_FP32",
        ),
        (_set("model_warmup.0.inputs", {"INPUT0": WarmupInput("TYPE_FP32", [-1], True)}), "dims must be concrete"),
        (_set("model_warmup.0.inputs", {"INPUT0": WarmupInput("TYPE_FP32", [16])}), "needs exactly one of zero"),
    ],
)
def test_it_names_the_invalid_field(change: Callable[[ModelConfig], None], message: str) -> None:
    config = valid_config()
    change(config)
    with pytest.raises(InvalidArgument) as caught:
        validate_config(config)
    assert message in caught.value.message


def test_it_rejects_dynamic_batching_without_batching() -> None:
    config = valid_config()
    config.max_batch_size = 0
    config.model_warmup = []
    with pytest.raises(InvalidArgument, match=r"dynamic_batching: needs max_batch_size > 0"):
        validate_config(config)


def test_it_rejects_scalars_and_empty_reshapes_without_batching() -> None:
    config = ModelConfig(name="m", input=[TensorConfig("X", "TYPE_FP32", [])])
    with pytest.raises(InvalidArgument, match="input 'X': must specify 'dims'"):
        validate_config(config)
    config.input = [TensorConfig("X", "TYPE_FP32", [1], reshape=[])]
    with pytest.raises(InvalidArgument, match="input 'X': reshape cannot be empty for a model without batching"):
        validate_config(config)


def test_it_rejects_priority_settings_without_priority_levels() -> None:
    config = valid_config()
    assert config.dynamic_batching is not None
    config.dynamic_batching.priority_levels = 0
    with pytest.raises(InvalidArgument, match="default_priority_level is set but priority_levels is 0"):
        validate_config(config)


# ---- sequence_batching --------------------------------------------------------------------------------------


def sequence_config() -> ModelConfig:
    """A valid sequence model: every control kind, one state started from a file."""
    return ModelConfig(
        name="counter",
        backend="onnxruntime",
        max_batch_size=4,
        input=[TensorConfig("INPUT", "TYPE_INT32", [1])],
        output=[TensorConfig("OUTPUT", "TYPE_INT32", [1]), TensorConfig("STATE_OUT", "TYPE_INT32", [-1])],
        sequence_batching=SequenceBatching(
            strategy="oldest",
            control_input=every_sequence_control("TYPE_STRING"),
            state=[
                SequenceState(
                    "STATE_IN",
                    "STATE_OUT",
                    "TYPE_INT32",
                    [-1, 2],
                    [InitialState("TYPE_INT32", [0, 2], data_file="empty.bin", name="empty")],
                )
            ],
            max_candidate_sequences=8,
            preferred_batch_size=[2, 4],
        ),
    )


def test_it_accepts_a_valid_sequence_config() -> None:
    validate_config(sequence_config())
    config = sequence_config()
    config.sequence_batching = SequenceBatching(minimum_slot_utilization=1.0, max_queue_delay_microseconds=50)
    validate_config(config)


def _control(index: int, **fields: object) -> Callable[[ModelConfig], None]:
    """A change that replaces control_input `index`'s one control with these fields."""

    def change(config: ModelConfig) -> None:
        assert config.sequence_batching is not None
        config.sequence_batching.control_input[index].control = [SequenceControl(**fields)]  # type: ignore[arg-type]

    return change


def _state(**fields: object) -> Callable[[ModelConfig], None]:
    def change(config: ModelConfig) -> None:
        assert config.sequence_batching is not None
        state = config.sequence_batching.state[0]
        for name, value in fields.items():
            target = state.initial_state[0] if name.startswith("initial_") else state
            setattr(target, name.removeprefix("initial_"), value)

    return change


SB = "model 'counter': sequence_batching"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_set("sequence_batching.strategy", "newest"), f"{SB}: unknown strategy 'newest' (expected direct or oldest)"),
        (_set("sequence_batching.max_sequence_idle_microseconds", -1), "max_sequence_idle_microseconds must be 0"),
        (_set("sequence_batching.max_queue_delay_microseconds", -5), "oldest max_queue_delay_microseconds must be 0"),
        (_set("sequence_batching.max_candidate_sequences", -1), f"{SB}: oldest max_candidate_sequences must be 0"),
        (_set("sequence_batching.preferred_batch_size", [8]), "oldest preferred_batch_size 8 must be between 1 and"),
        (_set("sequence_batching.preferred_batch_size", [0]), "oldest preferred_batch_size 0 must be between 1 and"),
        (_set("sequence_batching.minimum_slot_utilization", 0.5), f"{SB}: minimum_slot_utilization is a setting of"),
        (_set("sequence_batching.strategy", "direct"), f"{SB}: max_candidate_sequences is a setting of the oldest"),
        (_set("sequence_batching.control_input.0.name", ""), f"{SB}: control_input 0 must specify 'name'"),
        (_set("sequence_batching.control_input.1.name", "START"), "control_input 'START' names an input another"),
        (_set("sequence_batching.control_input.0.name", "INPUT"), "control_input 'INPUT' is also listed in 'input'"),
        (_set("sequence_batching.control_input.0.control", []), "control_input 'START' must list exactly one"),
        (_control(0, kind="CONTROL_SEQUENCE_BEGIN"), "control_input 'START': unknown kind 'CONTROL_SEQUENCE_BEGIN'"),
        (_control(0, kind="CONTROL_SEQUENCE_START"), "CONTROL_SEQUENCE_START needs exactly one of int32_false_true"),
        (
            _control(0, kind="CONTROL_SEQUENCE_START", int32_false_true=[0, 1], bool_false_true=[False, True]),
            "needs exactly one of int32_false_true, fp32_false_true, bool_false_true, got int32_false_true and bool",
        ),
        (
            _control(1, kind="CONTROL_SEQUENCE_END", fp32_false_true=[1.0]),
            "control_input 'END': CONTROL_SEQUENCE_END: fp32_false_true must have 2 values (false, true), got [1.0]",
        ),
        (
            _control(1, kind="CONTROL_SEQUENCE_START", int32_false_true=[0, 1]),
            f"{SB}: CONTROL_SEQUENCE_START is given by both control_input 'START' and 'END'",
        ),
        (
            _control(3, kind="CONTROL_SEQUENCE_CORRID", data_type="TYPE_FP32"),
            "control_input 'CORRID': CONTROL_SEQUENCE_CORRID needs data_type TYPE_UINT64, TYPE_INT64, TYPE_UINT32, "
            "TYPE_INT32, TYPE_STRING, got TYPE_FP32",
        ),
        (_control(3, kind="CONTROL_SEQUENCE_CORRID"), "CONTROL_SEQUENCE_CORRID needs data_type TYPE_UINT64"),
        (
            _control(3, kind="CONTROL_SEQUENCE_CORRID", data_type="TYPE_UINT64", int32_false_true=[0, 1]),
            "CONTROL_SEQUENCE_CORRID carries the sequence id and takes no int32_false_true",
        ),
        (_state(input_name=""), f"{SB}: state 0 must specify 'input_name'"),
        (_state(output_name=""), f"{SB}: state 0 must specify 'output_name'"),
        (_state(input_name="INPUT"), "state input_name 'INPUT' is also listed in 'input'"),
        (_state(input_name="CORRID"), "state input_name 'CORRID' names an input another control_input or state"),
        (_state(data_type="TYPE_INVALID"), f"{SB}: state 'STATE_IN': must specify 'data_type'"),
        (_state(dims=[0, 2]), "state 'STATE_IN': dims must be positive or -1, got [0, 2]"),
        (_state(initial_name=""), "state 'STATE_IN': initial_state must specify 'name'"),
        (
            _state(initial_data_type="TYPE_FP32"),
            "state 'STATE_IN': initial_state 'empty': data_type TYPE_FP32 must match the state's TYPE_INT32",
        ),
        (_state(initial_dims=[-1, 2]), "initial_state 'empty': dims must be fixed (0 or more)"),
        (_state(initial_dims=[2]), "one for each of the state's dims [-1, 2], got [2]"),
        (_state(initial_dims=[1, 3]), "initial_state 'empty': dims [1, 3] do not fit the state's dims [-1, 2]"),
        (_state(initial_zero_data=True), "initial_state 'empty': needs exactly one of zero_data, data_file"),
        (_state(initial_data_file=""), "initial_state 'empty': needs exactly one of zero_data, data_file"),
        (_state(initial_data_file="../secret"), "data_file '../secret' must be a file name inside the model's"),
        (_state(initial_data_file="sub/start.bin"), "data_file 'sub/start.bin' must be a file name inside"),
        (_state(initial_data_file=".."), "data_file '..' must be a file name inside the model's initial_state"),
    ],
)
def test_it_names_the_invalid_sequence_field(change: Callable[[ModelConfig], None], message: str) -> None:
    config = sequence_config()
    change(config)
    with pytest.raises(InvalidArgument) as caught:
        validate_config(config)
    assert message in caught.value.message


@pytest.mark.parametrize("utilization", [-0.1, 1.5, float("nan")])
def test_it_keeps_minimum_slot_utilization_between_0_and_1(utilization: float) -> None:
    config = sequence_config()
    config.sequence_batching = SequenceBatching(minimum_slot_utilization=utilization)
    with pytest.raises(InvalidArgument, match="direct minimum_slot_utilization must be between 0 and 1"):
        validate_config(config)


def test_it_allows_more_than_one_state_with_distinct_outputs() -> None:
    config = sequence_config()
    assert config.sequence_batching is not None
    config.sequence_batching.state.append(SequenceState("OTHER_IN", "OTHER_OUT", "TYPE_FP32", [1]))
    validate_config(config)
    config.sequence_batching.state[1].output_name = "STATE_OUT"
    with pytest.raises(InvalidArgument, match="state output_name 'STATE_OUT' is used by more than one state"):
        validate_config(config)
