"""config.pbtxt and JSON configs: every written form, round-trips, Triton's GET config JSON, overrides, errors."""

from __future__ import annotations

import json
import textwrap

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
    SequenceControlInput,
    SequenceState,
    TensorConfig,
    VersionPolicy,
    WarmupInput,
)
from engine.config.text_format import (
    config_to_dict,
    config_to_pbtxt,
    merge_config,
    parse_config_json,
    parse_config_pbtxt,
    replacing_override,
)
from engine.errors import InvalidArgument
from tests.engine.model_factory import every_sequence_control

FULL_PBTXT = textwrap.dedent(
    """
    # Triton writes configs like this one
    name: "simple"
    platform: "onnxruntime_onnx"
    max_batch_size: 8
    input [
      { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
      {
        name: "INPUT1", data_type: TYPE_INT32, dims: [ -1, 3 ]
        optional: true
      }
    ]
    input { name: "SCALAR" data_type: TYPE_BOOL dims: 1 reshape: { shape: [ ] } }
    output { name: "OUTPUT0" data_type: TYPE_STRING dims: 16 dims: 2 label_filename: "labels.txt" }
    instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0, 1 ] }, { name: "cpu" kind: KIND_CPU } ]
    dynamic_batching {
      preferred_batch_size: [ 4, 8 ]
      max_queue_delay_microseconds: 100
      preserve_ordering: true
      priority_levels: 2
      default_priority_level: 1
      default_queue_policy { max_queue_size: 10 timeout_action: DELAY default_timeout_microseconds: 5 }
      priority_queue_policy { key: 1 value { max_queue_size: 3 } }
      priority_queue_policy [ { key: 2 value: { allow_timeout_override: true } } ]
    }
    version_policy: { specific { versions: [ 1, 3 ] } }
    parameters { key: "intra_op_thread_count" value: { string_value: "2" } }
    parameters: { key: "note", value: { string_value: "a # not a comment" } }
    model_warmup [
      {
        name: "zeros"
        batch_size: 2
        inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } }
        count: 3
      }
    ]
    default_model_filename: "model.onnx"
    optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt" } ] } }
    response_cache { enable: true }
    """
)


def full_config() -> ModelConfig:
    return ModelConfig(
        name="simple",
        platform="onnxruntime_onnx",
        max_batch_size=8,
        input=[
            TensorConfig("INPUT0", "TYPE_FP32", [16]),
            TensorConfig("INPUT1", "TYPE_INT32", [-1, 3], optional=True),
            TensorConfig("SCALAR", "TYPE_BOOL", [1], reshape=[]),
        ],
        output=[TensorConfig("OUTPUT0", "TYPE_STRING", [16, 2])],
        instance_group=[
            InstanceGroup(count=2, kind="KIND_GPU", gpus=[0, 1]),
            InstanceGroup(name="cpu", kind="KIND_CPU"),
        ],
        dynamic_batching=DynamicBatching(
            preferred_batch_size=[4, 8],
            max_queue_delay_microseconds=100,
            preserve_ordering=True,
            priority_levels=2,
            default_priority_level=1,
            default_queue_policy=QueuePolicy(timeout_action="DELAY", default_timeout_microseconds=5, max_queue_size=10),
            priority_queue_policy={1: QueuePolicy(max_queue_size=3), 2: QueuePolicy(allow_timeout_override=True)},
        ),
        version_policy=VersionPolicy(kind="specific", versions=[1, 3]),
        model_warmup=[
            ModelWarmup(
                name="zeros",
                batch_size=2,
                inputs={"INPUT0": WarmupInput("TYPE_FP32", [16], zero_data=True)},
                count=3,
            )
        ],
        parameters={"intra_op_thread_count": "2", "note": "a # not a comment"},
        default_model_filename="model.onnx",
    )


def test_it_parses_every_pbtxt_form() -> None:
    assert parse_config_pbtxt(FULL_PBTXT) == full_config()


def test_it_fills_triton_defaults_for_unset_fields() -> None:
    config = parse_config_pbtxt('name: "m"\ninstance_group { kind: KIND_CPU }\nsequence_batching { }')
    assert config.version_policy == VersionPolicy(kind="latest", num_versions=1)
    assert config.instance_group == [InstanceGroup(count=1, kind="KIND_CPU")]
    assert config.sequence_batching == SequenceBatching(max_sequence_idle_microseconds=1_000_000, strategy="direct")
    assert config.dynamic_batching is None
    assert parse_config_pbtxt("").name == ""


@pytest.mark.parametrize(
    ("text", "policy"),
    [
        ("version_policy: { latest { num_versions: 2 } }", VersionPolicy(kind="latest", num_versions=2)),
        ("version_policy: { all {} }", VersionPolicy(kind="all")),
        ("version_policy { all: { } }", VersionPolicy(kind="all")),
        ("version_policy: { specific { versions: 4 versions: 2 } }", VersionPolicy(kind="specific", versions=[4, 2])),
    ],
)
def test_it_parses_each_version_policy(text: str, policy: VersionPolicy) -> None:
    assert parse_config_pbtxt(text).version_policy == policy


def test_it_keeps_ensemble_steps_and_sequence_strategy() -> None:
    config = parse_config_pbtxt(
        'platform: "ensemble"\nensemble_scheduling { step [ { model_name: "a" model_version: -1 '
        'input_map { key: "x" value: "IN" } output_map { key: "y" value: "OUT" } } ] }'
    )
    assert config.ensemble_scheduling == {
        "step": [{"model_name": "a", "model_version": -1, "input_map": {"x": "IN"}, "output_map": {"y": "OUT"}}]
    }
    assert parse_config_pbtxt(config_to_pbtxt(config)) == config
    oldest = parse_config_pbtxt("sequence_batching { max_sequence_idle_microseconds: 5 oldest { } }")
    assert oldest.sequence_batching == SequenceBatching(max_sequence_idle_microseconds=5, strategy="oldest")


def test_it_round_trips_through_pbtxt() -> None:
    config = full_config()
    text = config_to_pbtxt(config)
    assert "dims: [16]" in text
    assert parse_config_pbtxt(text) == config


def test_it_round_trips_through_the_config_dict() -> None:
    config = full_config()
    as_dict = config_to_dict(config)
    assert parse_config_json(as_dict) == config
    assert parse_config_json(json.dumps(as_dict)) == config
    assert parse_config_json(json.dumps(as_dict).encode()) == config


def test_it_answers_the_config_dict_as_triton_does() -> None:
    as_dict = config_to_dict(full_config())
    # original field names, 64-bit integers as JSON numbers (Triton fixes protobuf's quoted int64s)
    assert as_dict["max_batch_size"] == 8
    assert as_dict["input"][0] == {
        "name": "INPUT0",
        "data_type": "TYPE_FP32",
        "format": "FORMAT_NONE",
        "dims": [16],
        "is_shape_tensor": False,
        "allow_ragged_batch": False,
        "optional": False,
        "is_non_linear_format_io": False,
    }
    assert as_dict["input"][2]["reshape"] == {"shape": []}
    assert "reshape" not in as_dict["input"][0]
    batching = as_dict["dynamic_batching"]
    assert batching["max_queue_delay_microseconds"] == 100
    assert batching["default_queue_policy"]["default_timeout_microseconds"] == 5
    assert batching["priority_queue_policy"]["1"]["max_queue_size"] == 3  # JSON keys stay strings
    assert as_dict["version_policy"] == {"specific": {"versions": [1, 3]}}
    assert as_dict["parameters"]["intra_op_thread_count"] == {"string_value": "2"}
    assert as_dict["model_warmup"][0]["inputs"]["INPUT0"]["dims"] == [16]
    assert as_dict["instance_group"][1]["count"] == 1
    # fields without a value are printed with their defaults; unset messages are left out
    assert as_dict["backend"] == ""
    assert as_dict["batch_input"] == []
    assert "sequence_batching" not in as_dict
    assert json.loads(json.dumps(as_dict)) == as_dict


def test_it_answers_the_default_version_policy() -> None:
    assert config_to_dict(ModelConfig(name="m"))["version_policy"] == {"latest": {"num_versions": 1}}


def test_it_reads_lower_camel_case_json_and_quoted_integers() -> None:
    config = parse_config_json(
        {
            "name": "m",
            "maxBatchSize": "16",
            "input": [{"name": "X", "dataType": "TYPE_FP32", "dims": ["-1", 4]}],
            "dynamicBatching": {"maxQueueDelayMicroseconds": "250", "priorityQueuePolicy": {"1": {"maxQueueSize": 2}}},
            "versionPolicy": {"latest": {"numVersions": 2}},
        }
    )
    assert config.max_batch_size == 16
    assert config.input == [TensorConfig("X", "TYPE_FP32", [-1, 4])]
    assert config.dynamic_batching is not None
    assert config.dynamic_batching.max_queue_delay_microseconds == 250
    assert config.dynamic_batching.priority_queue_policy == {1: QueuePolicy(max_queue_size=2)}
    assert config.version_policy == VersionPolicy(kind="latest", num_versions=2)


def test_it_merges_an_override_field_by_field() -> None:
    base = full_config()
    merged = merge_config(base, {"max_batch_size": "16", "instanceGroup": [{"kind": "KIND_CPU", "count": 3}]})
    assert merged.max_batch_size == 16
    assert merged.instance_group == [InstanceGroup(count=3, kind="KIND_CPU")]
    assert merged.input == base.input and merged.dynamic_batching == base.dynamic_batching
    assert base.max_batch_size == 8  # the base is left as it was


def test_it_clears_and_replaces_whole_fields_in_an_override() -> None:
    base = full_config()
    merged = merge_config(base, {"dynamic_batching": None, "input": [], "parameters": {"k": {"string_value": "v"}}})
    assert merged.dynamic_batching is None
    assert merged.input == []
    assert merged.parameters == {"k": "v"}
    swapped = merge_config(base, {"sequence_batching": {}})
    assert swapped.dynamic_batching is None and swapped.sequence_batching is not None
    assert merge_config(base, {"max_batch_size": 0}).max_batch_size == 0


def test_a_replacing_override_turns_any_base_into_the_config() -> None:
    wanted = ModelConfig(name="m", max_batch_size=2, instance_group=[InstanceGroup(count=2, kind="KIND_CPU")])
    override = replacing_override(wanted)
    assert override["dynamic_batching"] is None and override["max_batch_size"] == 2
    assert merge_config(full_config(), override) == wanted


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name: "a"\nmax_batchsize: 3', "config.pbtxt: line 2: unknown field 'max_batchsize' in ModelConfig"),
        ("input { nme: 'x' }", "config.pbtxt: line 1: unknown field 'nme' in ModelInput"),
        ('input [{ name: "x" data_type: TYPE_FP33 }]', "line 1: field 'data_type': unknown value 'TYPE_FP33'"),
        ("max_batch_size: 3\nmax_batch_size: 4", "line 2: field 'max_batch_size' is set more than once"),
        ("max_batch_size: 'eight'", "config.pbtxt: line 1: field 'max_batch_size'"),
        ("input {\n  dims: [1, x]\n}", "config.pbtxt: line 2: field 'dims'"),
        ("instance_group { kind: KIND_FOO }", "field 'kind': unknown value 'KIND_FOO' (expected one of KIND_AUTO"),
        ("dynamic_batching { }\nsequence_batching { }", "line 2: field 'sequence_batching' cannot be set together"),
        ("version_policy { latest { num_versions: -1 } }", "field 'num_versions'"),
    ],
)
def test_it_names_the_line_and_field_of_a_pbtxt_error(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_config_pbtxt(text)
    assert message in caught.value.message
    assert "infera.config" not in caught.value.message


def test_it_names_the_file_it_was_given() -> None:
    with pytest.raises(InvalidArgument, match=r"^simple/config.pbtxt: line 1: unknown field 'bogus'"):
        parse_config_pbtxt("bogus: 1", source="simple/config.pbtxt")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"max_batchsize": 1}, "config.json: unknown field 'max_batchsize' in ModelConfig"),
        ({"dynamic_batching": {"foo": 1}}, "unknown field 'foo' in ModelConfig.dynamic_batching"),
        ({"input": [{"data_type": "TYPE_X"}]}, "ModelConfig.input[0].data_type: unknown value 'TYPE_X'"),
        ({"input": [{"dims": ["x"]}]}, "input.dims"),
        ({"max_batch_size": 1.5}, "ModelConfig.max_batch_size"),
        ({"dynamic_batching": {}, "sequence_batching": {}}, "only one of dynamic_batching, sequence_batching"),
        ("{not json", "config.json: not valid JSON"),
        ("[1, 2]", "config.json: expected a JSON object, got list"),
    ],
)
def test_it_names_the_field_of_a_json_error(data: object, message: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_config_json(data)  # type: ignore[arg-type]
    assert message in caught.value.message


def test_it_rejects_an_override_with_an_unknown_field() -> None:
    with pytest.raises(InvalidArgument, match="config override: unknown field 'max_batch' in ModelConfig"):
        merge_config(full_config(), {"max_batch": 3})


def test_it_names_the_tensor_when_writing_an_unknown_data_type() -> None:
    config = ModelConfig(name="m", input=[TensorConfig("X", "FP32", [1])])
    with pytest.raises(InvalidArgument, match="model 'm': input 'X': data_type: unknown value 'FP32'"):
        config_to_dict(config)


# ---- sequence_batching --------------------------------------------------------------------------------------

SEQUENCE_PBTXT = textwrap.dedent(
    """
    name: "counter"
    max_batch_size: 4
    sequence_batching {
      max_sequence_idle_microseconds: 5000000
      oldest { max_candidate_sequences: 8 preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100
               preserve_ordering: true }
      control_input [
        { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
        { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
        { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
        { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
      ]
      state [
        {
          input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ -1 ]
          initial_state: { data_type: TYPE_INT32 dims: [ 3 ] data_file: "start.bin" name: "from a file" }
        },
        {
          input_name: "TOTAL_IN" output_name: "TOTAL_OUT" data_type: TYPE_FP32 dims: [ 1 ]
          initial_state [ { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "zeros" } ]
        }
      ]
    }
    """
)


def sequence_config() -> ModelConfig:
    return ModelConfig(
        name="counter",
        max_batch_size=4,
        sequence_batching=SequenceBatching(
            max_sequence_idle_microseconds=5_000_000,
            strategy="oldest",
            control_input=every_sequence_control(),
            state=[
                SequenceState(
                    "STATE_IN",
                    "STATE_OUT",
                    "TYPE_INT32",
                    [-1],
                    [InitialState("TYPE_INT32", [3], data_file="start.bin", name="from a file")],
                ),
                SequenceState(
                    "TOTAL_IN",
                    "TOTAL_OUT",
                    "TYPE_FP32",
                    [1],
                    [InitialState("TYPE_FP32", [1], zero_data=True, name="zeros")],
                ),
            ],
            max_queue_delay_microseconds=100,
            max_candidate_sequences=8,
            preferred_batch_size=[2, 4],
            preserve_ordering=True,
        ),
    )


def test_it_reads_every_sequence_batching_field() -> None:
    assert parse_config_pbtxt(SEQUENCE_PBTXT) == sequence_config()


def test_it_reads_the_direct_strategy_settings() -> None:
    config = parse_config_pbtxt(
        "sequence_batching { direct { max_queue_delay_microseconds: 300 minimum_slot_utilization: 0.5 } }"
    )
    assert config.sequence_batching == SequenceBatching(
        strategy="direct", max_queue_delay_microseconds=300, minimum_slot_utilization=0.5
    )


@pytest.mark.parametrize(
    "config",
    [
        sequence_config(),
        ModelConfig(
            name="direct",
            max_batch_size=2,
            sequence_batching=SequenceBatching(max_queue_delay_microseconds=7, minimum_slot_utilization=0.25),
        ),
    ],
)
def test_it_round_trips_sequence_batching_through_pbtxt_and_the_config_dict(config: ModelConfig) -> None:
    assert parse_config_pbtxt(config_to_pbtxt(config)) == config
    assert parse_config_json(json.dumps(config_to_dict(config))) == config


def test_it_answers_sequence_batching_as_triton_does() -> None:
    batching = config_to_dict(sequence_config())["sequence_batching"]
    assert batching["max_sequence_idle_microseconds"] == 5_000_000
    # every field of a control is printed, the unused ones with their defaults
    assert batching["control_input"][0] == {
        "name": "START",
        "control": [
            {
                "kind": "CONTROL_SEQUENCE_START",
                "int32_false_true": [0, 1],
                "fp32_false_true": [],
                "data_type": "TYPE_INVALID",
                "bool_false_true": [],
            }
        ],
    }
    assert batching["control_input"][2]["control"][0]["bool_false_true"] == [False, True]
    assert batching["control_input"][3]["control"][0]["data_type"] == "TYPE_UINT64"
    assert batching["oldest"] == {
        "max_candidate_sequences": 8,
        "preferred_batch_size": [2, 4],
        "max_queue_delay_microseconds": 100,
        "preserve_ordering": True,
    }
    assert "direct" not in batching
    assert batching["state"][0] == {
        "input_name": "STATE_IN",
        "output_name": "STATE_OUT",
        "data_type": "TYPE_INT32",
        "dims": [-1],
        "initial_state": [{"data_type": "TYPE_INT32", "dims": [3], "data_file": "start.bin", "name": "from a file"}],
        "use_same_buffer_for_input_output": False,
        "use_growable_memory": False,
    }
    assert batching["state"][1]["initial_state"][0]["zero_data"] is True
    assert batching["iterative_sequence"] is False
    direct = config_to_dict(ModelConfig(name="m", max_batch_size=2, sequence_batching=SequenceBatching()))
    assert direct["sequence_batching"]["direct"] == {"max_queue_delay_microseconds": 0, "minimum_slot_utilization": 0}
    assert "oldest" not in direct["sequence_batching"]


def test_it_reads_the_json_triton_answers_for_a_sequence_model() -> None:
    # Triton leaves initial_state dims quoted (its int64 fix-up looks for initial_state in the wrong object)
    config = parse_config_json(
        {
            "name": "counter",
            "max_batch_size": 4,
            "sequence_batching": {
                "max_sequence_idle_microseconds": 5000000,
                "control_input": [
                    {
                        "name": "START",
                        "control": [
                            {
                                "kind": "CONTROL_SEQUENCE_START",
                                "int32_false_true": [0, 1],
                                "fp32_false_true": [],
                                "bool_false_true": [],
                                "data_type": "TYPE_INVALID",
                            }
                        ],
                    }
                ],
                "state": [
                    {
                        "input_name": "STATE_IN",
                        "output_name": "STATE_OUT",
                        "data_type": "TYPE_INT32",
                        "dims": [-1],
                        "initial_state": [{"data_type": "TYPE_INT32", "dims": ["3"], "zero_data": True, "name": "z"}],
                        "use_same_buffer_for_input_output": False,
                        "use_growable_memory": False,
                    }
                ],
                "direct": {"max_queue_delay_microseconds": 0, "minimum_slot_utilization": 0.0},
                "iterative_sequence": False,
            },
        }
    )
    assert config.sequence_batching == SequenceBatching(
        max_sequence_idle_microseconds=5_000_000,
        control_input=[SequenceControlInput("START", [SequenceControl("CONTROL_SEQUENCE_START", [0, 1])])],
        state=[
            SequenceState(
                "STATE_IN", "STATE_OUT", "TYPE_INT32", [-1], [InitialState("TYPE_INT32", [3], zero_data=True, name="z")]
            )
        ],
    )


def test_it_keeps_float32_settings_as_they_were_written() -> None:
    config = parse_config_pbtxt(
        "max_batch_size: 2\nsequence_batching { direct { minimum_slot_utilization: 0.3 } control_input { "
        'name: "S" control { kind: CONTROL_SEQUENCE_START fp32_false_true: [ -0.1, 1.7 ] } } }'
    )
    assert config.sequence_batching is not None
    assert config.sequence_batching.minimum_slot_utilization == 0.3  # not 0.30000001192092896
    assert config.sequence_batching.control_input[0].control[0].fp32_false_true == [-0.1, 1.7]
    assert config_to_dict(config)["sequence_batching"]["direct"]["minimum_slot_utilization"] == 0.3
    assert parse_config_pbtxt(config_to_pbtxt(config)) == config


def test_it_starts_from_zeros_whenever_zero_data_is_present() -> None:
    # Triton's scheduler switches on which of zero_data / data_file is present, not on the value
    config = parse_config_pbtxt(
        'sequence_batching { state { input_name: "I" output_name: "O" data_type: TYPE_FP32 dims: 1 '
        'initial_state { data_type: TYPE_FP32 dims: 1 zero_data: false name: "z" } } }'
    )
    assert config.sequence_batching is not None
    assert config.sequence_batching.state[0].initial_state[0].zero_data is True


@pytest.mark.parametrize(
    ("batching", "message"),
    [
        (
            SequenceBatching(control_input=[SequenceControlInput("S", [SequenceControl("START")])]),
            "model 'm': sequence_batching: control_input 'S': kind: unknown value 'START'",
        ),
        (
            SequenceBatching(
                control_input=[SequenceControlInput("C", [SequenceControl("CONTROL_SEQUENCE_CORRID", data_type="U64")])]
            ),
            "model 'm': sequence_batching: control_input 'C': data_type: unknown value 'U64'",
        ),
        (
            SequenceBatching(state=[SequenceState("I", "O", "TYPE_FP32", [1], [InitialState("FP32", [1])])]),
            "model 'm': sequence_batching: state 'I': initial_state: data_type: unknown value 'FP32'",
        ),
        (SequenceBatching(strategy="newest"), "model 'm': sequence_batching: unknown strategy 'newest'"),
    ],
)
def test_it_names_the_sequence_field_it_cannot_write(batching: SequenceBatching, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        config_to_pbtxt(ModelConfig(name="m", sequence_batching=batching))
