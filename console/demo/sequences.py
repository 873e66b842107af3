"""The demo sequence models (Triton's accumulator contract), built locally; importable without Django (tests, bench).

- `simple_sequence`: a python model, direct strategy. INT32 `INPUT` [1]; the server fills `START` and `READY`;
  `OUTPUT` is the sequence's running sum (START resets it). Its sums live in the model, by correlation id.
- `simple_dyna_sequence`: the same with a `CORRID` control (UINT64), oldest strategy; at the END request
  `OUTPUT` is the running sum plus the correlation id, so a client can tell its sequence was the one summed.
- `simple_sequence_onnx`: the accumulator as an ONNX graph with implicit state: the server feeds the last
  `STATE_OUT` back as `STATE_IN`, kept per sequence and reset at START; oldest strategy, so sequences batch.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

CONTROLS = """\
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START {kind}_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY {kind}_false_true: [ 0, 1 ] }} ] }}{extra}
  ]"""

SIMPLE_SEQUENCE_CONFIG = (
    """\
name: "simple_sequence"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
"""
    + CONTROLS.format(kind="int32", extra="")
    + """
  direct { }
}
"""
)

SIMPLE_DYNA_SEQUENCE_CONFIG = (
    """\
name: "simple_dyna_sequence"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
"""
    + CONTROLS.format(
        kind="int32",
        extra=""",
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }""",
    )
    + """
  oldest { max_candidate_sequences: 64 preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 1000 }
}
"""
)

SIMPLE_SEQUENCE_ONNX_CONFIG = (
    """\
name: "simple_sequence_onnx"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
"""
    + CONTROLS.format(kind="int32", extra="")
    + """
  state [
    {
      input_name: "STATE_IN"
      output_name: "STATE_OUT"
      data_type: TYPE_INT32
      dims: [ 1 ]
      initial_state: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zeros" }
    }
  ]
  oldest { max_candidate_sequences: 64 preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 1000 }
}
"""
)

ACCUMULATOR_MODEL_PY = '''\
"""An accumulator: OUTPUT is the running sum of a sequence's INPUTs; START resets it, READY false is a filler."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        controls = [c["name"] for c in config["sequence_batching"].get("control_input", [])]
        self.adds_corrid = "CORRID" in controls
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().ravel()[0])
            start = int(pb_utils.get_input_tensor_by_name(request, "START").as_numpy().ravel()[0])
            ready = int(pb_utils.get_input_tensor_by_name(request, "READY").as_numpy().ravel()[0])
            key = request.correlation_id()
            if not ready:  # an empty batch slot: nothing to add, nobody reads the answer
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", np.zeros((1, 1), np.int32))]))
                continue
            total = value if start else self.sums.get(key, 0) + value
            self.sums[key] = total
            answer = total
            if self.adds_corrid:
                end = int(pb_utils.get_input_tensor_by_name(request, "END").as_numpy().ravel()[0])
                corrid = int(pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy().ravel()[0])
                if end:
                    answer = total + corrid
                    self.sums.pop(key, None)
            out = np.array([[answer]], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", out)]))
        return responses
'''


def accumulator_onnx_bytes() -> bytes:
    """OUTPUT = STATE_OUT = (START ? 0 : STATE_IN) + INPUT * READY, INT32 [batch, 1]."""
    import onnx
    from onnx import TensorProto, helper

    def tensor(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.INT32, ["batch", 1])

    one = helper.make_tensor("one", TensorProto.INT32, [], [1])
    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["one", "START"], ["keep"]),
            helper.make_node("Mul", ["STATE_IN", "keep"], ["carried"]),
            helper.make_node("Mul", ["INPUT", "READY"], ["added"]),
            helper.make_node("Add", ["carried", "added"], ["OUTPUT"]),
            helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"]),
        ],
        "simple_sequence_onnx",
        [tensor(name) for name in ("INPUT", "START", "READY", "STATE_IN")],
        [tensor("OUTPUT"), tensor("STATE_OUT")],
        initializer=[one],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


# (model, config, model file name, builder)
SEQUENCE_MODELS: tuple[tuple[str, str, str, Callable[[], bytes]], ...] = (
    ("simple_sequence", SIMPLE_SEQUENCE_CONFIG, "model.py", ACCUMULATOR_MODEL_PY.encode),
    ("simple_dyna_sequence", SIMPLE_DYNA_SEQUENCE_CONFIG, "model.py", ACCUMULATOR_MODEL_PY.encode),
    ("simple_sequence_onnx", SIMPLE_SEQUENCE_ONNX_CONFIG, "model.onnx", accumulator_onnx_bytes),
)


def write_sequence_models(store: Path, names: tuple[str, ...] | None = None) -> None:
    """Write the sequence models (or those `names` lists) into a repository folder (tests; `seed_repository`
    keeps what is already there)."""
    for name, config, filename, build in SEQUENCE_MODELS:
        if names is not None and name not in names:
            continue
        folder = Path(store) / name / "1"
        folder.mkdir(parents=True, exist_ok=True)
        (Path(store) / name / "config.pbtxt").write_text(config)
        (folder / filename).write_bytes(build())
