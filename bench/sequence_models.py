"""The sequences section's three models: one ONNX accumulator under direct, oldest, and no sequence batching.

All three run `console/demo/sequences.py`'s graph (OUTPUT = STATE_OUT = (START ? 0 : STATE_IN) + INPUT * READY,
INT32 [batch, 1]) on one instance with `max_batch_size` 64, so 64 sequences are live at once under either strategy:
direct gives each its own slot of the 64, oldest keeps all 64 as candidates. One instance of 64 rather than 8 of
8: on a 2-core machine eight onnxruntime sessions would only take turns. Oldest and the baseline's dynamic batcher
share `preferred_batch_size` and `max_queue_delay_microseconds`; direct keeps Triton's defaults (no minimum slot
utilization, so a batch goes as soon as the instance is free). The baseline has no sequence batching: the client
sends START, READY and STATE_IN itself as ordinary inputs, so the server does the same compute with no state.
"""

from __future__ import annotations

from pathlib import Path

from bench.models import ONNX_THREADS, write_if_changed
from console.demo.sequences import CONTROLS, accumulator_onnx_bytes

MAX_BATCH_SIZE = 64
CANDIDATES = 64
PREFERRED_BATCH_SIZES = (16, 32, 64)
QUEUE_DELAY_US = 1000
IDLE_US = 5_000_000
DIRECT = "accumulator_direct"
OLDEST = "accumulator_oldest"
STATELESS = "accumulator_stateless"
# model -> the label of the report
STRATEGIES = {DIRECT: "direct", OLDEST: "oldest", STATELESS: "none (dynamic batching)"}
STATE = """\
  state [
    {
      input_name: "STATE_IN"
      output_name: "STATE_OUT"
      data_type: TYPE_INT32
      dims: [ 1 ]
      initial_state: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zeros" }
    }
  ]
"""


def _tensors(section: str, names: tuple[str, ...]) -> str:
    entries = ", ".join(f'{{ name: "{name}" data_type: TYPE_INT32 dims: [ 1 ] }}' for name in names)
    return f"{section} [ {entries} ]\n"


def _head(name: str, inputs: tuple[str, ...], outputs: tuple[str, ...]) -> str:
    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {MAX_BATCH_SIZE}\n'
        + _tensors("input", inputs)
        + _tensors("output", outputs)
        + "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    )


def _preferred() -> str:
    return f"preferred_batch_size: [ {', '.join(map(str, PREFERRED_BATCH_SIZES))} ]"


def sequence_config(name: str, strategy: str) -> str:
    """The config.pbtxt of the accumulator under `strategy` ("direct" or "oldest"): START/READY controls, state."""
    if strategy == "direct":
        chosen = "  direct { }\n"
    else:
        chosen = (
            f"  oldest {{ max_candidate_sequences: {CANDIDATES} {_preferred()} "
            f"max_queue_delay_microseconds: {QUEUE_DELAY_US} }}\n"
        )
    return (
        _head(name, ("INPUT",), ("OUTPUT",))
        + f"sequence_batching {{\n  max_sequence_idle_microseconds: {IDLE_US}\n"
        + CONTROLS.format(kind="int32", extra="")
        + "\n"
        + STATE
        + chosen
        + "}\n"
        + ONNX_THREADS
    )


def stateless_config(name: str) -> str:
    """The baseline: the same graph with every input the client's, the dynamic batcher as oldest's."""
    return (
        _head(name, ("INPUT", "START", "READY", "STATE_IN"), ("OUTPUT", "STATE_OUT"))
        + f"dynamic_batching {{ {_preferred()} max_queue_delay_microseconds: {QUEUE_DELAY_US} }}\n"
        + ONNX_THREADS
    )


def write_sequence_repository(root: Path | str) -> Path:
    """Write (or reuse, when already identical) the three accumulators under `root`."""
    root = Path(root)
    graph = accumulator_onnx_bytes()
    configs = {
        DIRECT: sequence_config(DIRECT, "direct"),
        OLDEST: sequence_config(OLDEST, "oldest"),
        STATELESS: stateless_config(STATELESS),
    }
    for name, config in configs.items():
        (root / name / "1").mkdir(parents=True, exist_ok=True)
        write_if_changed(root / name / "config.pbtxt", config.encode())
        write_if_changed(root / name / "1" / "model.onnx", graph)
    return root
