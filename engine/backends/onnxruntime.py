"""The onnxruntime backend: an ONNX model on the CPU or one CUDA GPU, auto-completing configs from its graph."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from engine.backends import register_backend
from engine.backends.base import Backend
from engine.backends.gpu_transfers import IoBindingRunner, pinned_buffers, uses_io_binding
from engine.backends.tensor_layout import int_parameter, sequence_tensors, to_config_shape, to_model_shape
from engine.config.datatypes import config_to_wire, numpy_dtype
from engine.config.model_config import DynamicBatching, InstanceGroup, ModelConfig, TensorConfig, cpu_instance_count
from engine.errors import BackendError, LoadError
from engine.serving.devices import usable_cores

# ONNX element type names (lower case, as onnxruntime spells them inside "tensor(...)") -> config types
ONNX_TO_CONFIG_TYPE = {
    "bool": "TYPE_BOOL",
    "uint8": "TYPE_UINT8",
    "uint16": "TYPE_UINT16",
    "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64",
    "int8": "TYPE_INT8",
    "int16": "TYPE_INT16",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "float16": "TYPE_FP16",
    "float": "TYPE_FP32",
    "double": "TYPE_FP64",
    "bfloat16": "TYPE_BF16",
    "string": "TYPE_STRING",
}
# Triton's default-max-batch-size: what auto-completion gives a model with a dynamic batch dim
DEFAULT_MAX_BATCH_SIZE = 4
PLATFORM = "onnxruntime_onnx"


@dataclass(frozen=True, slots=True)
class ModelTensor:
    """One input or output as the ONNX graph declares it; -1 marks a dynamic dimension."""

    name: str
    data_type: str
    dims: tuple[int, ...]


@register_backend
class OnnxRuntimeBackend(Backend):
    """Runs `model.onnx` in one onnxruntime InferenceSession."""

    name = "onnxruntime"
    runs_on_loop = True

    def load(self) -> None:
        self.require_model_file()
        options = self._session_options()
        providers: list[Any] = ["CPUExecutionProvider"]
        if self.device.is_gpu:
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise LoadError(
                    f"instance on GPU {self.device.id} needs CUDAExecutionProvider, which this onnxruntime "
                    f"build lacks (available: {', '.join(ort.get_available_providers())})"
                )
            providers = [("CUDAExecutionProvider", {"device_id": self.device.id}), "CPUExecutionProvider"]
        try:
            self.session = ort.InferenceSession(str(self.model_path), sess_options=options, providers=providers)
        except Exception as exc:
            raise LoadError(f"onnxruntime could not load '{self.model_path.name}': {exc}") from exc
        # onnxruntime falls back to the CPU with only a log line when CUDA cannot start; a GPU instance may not
        if self.device.is_gpu and "CUDAExecutionProvider" not in self.session.get_providers():
            raise LoadError(
                f"CUDAExecutionProvider could not start on GPU {self.device.id} (no such CUDA device, or the "
                "CUDA/cuDNN libraries onnxruntime needs are missing; its log above says which)"
            )
        model_inputs = [_session_tensor(arg) for arg in self.session.get_inputs()]
        model_outputs = [_session_tensor(arg) for arg in self.session.get_outputs()]
        check_against_model(self.config, model_inputs, model_outputs)
        self._batched = self.config.max_batch_size > 0
        self._input_configs = {t.name: t for t in self.config.input}  # looked up per batch: no scan of the config
        self._output_configs = {t.name: t for t in self.config.output}
        self._feed_dtypes = {t.name: _numpy_dtype(t.data_type) for t in model_inputs}
        names = [t.name for t in self.config.output] or [t.name for t in model_outputs]
        # the sequence batcher takes each state output back as the next request's state input
        _, state_outputs = sequence_tensors(self.config)
        self._output_names = names + [t.name for t in state_outputs if t.name not in names]
        # on a GPU: inputs up from pinned host buffers, outputs copied down once per batch (IO binding)
        self._runner: IoBindingRunner | None = None
        if uses_io_binding(self.device, self.config, self.session.get_providers()):
            pinned = pinned_buffers(self.device)
            self._runner = IoBindingRunner(self.session, self._output_names, "cuda", self.device.id, pinned)

    def _session_options(self) -> ort.SessionOptions:
        """Thread counts from Triton's parameter names, else a share of the cores per CPU instance.

        Each instance already runs in its own worker thread, so concurrency comes from instances and batches;
        sessions that each took every core would oversubscribe the machine and slow every instance down.
        """
        options = ort.SessionOptions()
        intra = int_parameter(self.config, "intra_op_thread_count")
        inter = int_parameter(self.config, "inter_op_thread_count")
        options.intra_op_num_threads = intra if intra is not None else default_intra_op_threads(self.config)
        options.inter_op_num_threads = inter if inter is not None else 1
        return options

    def execute(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        feeds = {}
        for name, array in batch.items():
            array = to_model_shape(array, self._input_configs.get(name), self._batched)
            dtype = self._feed_dtypes.get(name)
            if dtype is not None and dtype.kind == "O":
                array = _to_str_array(name, array)
            elif dtype is not None and array.dtype != dtype:
                array = array.astype(dtype)
            feeds[name] = array
        try:
            if self._runner is not None:
                results = self._runner.run(feeds)
            else:
                results = self.session.run(self._output_names, feeds)
        except Exception as exc:
            raise BackendError(f"onnxruntime failed running model '{self.config.name}': {exc}") from exc
        outputs = {}
        for name, value in zip(self._output_names, results, strict=True):
            if value.dtype.kind == "O":
                value = _to_bytes_array(value)
            outputs[name] = to_config_shape(value, self._output_configs.get(name), self._batched)
        return outputs

    def unload(self) -> None:
        runner = getattr(self, "_runner", None)  # None too when load() failed before it
        if runner is not None and runner.pinned is not None:
            runner.pinned.close()
        self.session = None

    @classmethod
    def autocomplete(cls, config: ModelConfig, version_path: Path) -> ModelConfig:
        """Fill platform, batching, inputs and outputs from the ONNX graph; check what the config says."""
        path = Path(version_path) / config.model_filename
        if not path.is_file():
            return config  # load() reports the missing file with the version it belongs to
        model_inputs, model_outputs = read_onnx_signature(path)
        config = copy.deepcopy(config)
        config.platform = config.platform or PLATFORM
        config.backend = config.backend or cls.name
        everything = model_inputs + model_outputs
        if (
            config.max_batch_size == 0
            and not config.input
            and not config.output
            and everything
            and all(t.dims and t.dims[0] == -1 for t in everything)
        ):
            config.max_batch_size = DEFAULT_MAX_BATCH_SIZE
            # as Triton: a model that batches with no scheduler configured gets the dynamic batcher
            if config.dynamic_batching is None and config.sequence_batching is None:
                config.dynamic_batching = DynamicBatching()
        skip = 1 if config.max_batch_size > 0 else 0
        # control and state inputs are the server's to fill, state outputs the server's to take back
        served, taken_back = sequence_tensors(config)
        known = {t.name for t in config.input + served}
        config.input += [_config_tensor(t, skip) for t in model_inputs if t.name not in known]
        # a config may serve a subset of the outputs, so outputs are filled only when none are listed
        if not config.output:
            state_outputs = {t.name for t in taken_back}
            config.output = [_config_tensor(t, skip) for t in model_outputs if t.name not in state_outputs]
        check_against_model(config, model_inputs, model_outputs)
        return config


def default_intra_op_threads(config: ModelConfig) -> int:
    """The usable cores shared out among the model's CPU instances, at least one each."""
    cores = usable_cores()
    groups = config.instance_group or [InstanceGroup(count_given=False)]
    instances = sum(cpu_instance_count(g, config.backend_name) for g in groups if g.kind != "KIND_GPU") or 1
    return max(1, cores // instances)


def read_onnx_signature(path: Path) -> tuple[list[ModelTensor], list[ModelTensor]]:
    """The graph's inputs (initializers excluded) and outputs, read without loading external weights."""
    import onnx

    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception as exc:
        raise LoadError(f"'{path.name}' is not a readable ONNX model: {exc}") from exc
    initializers = {init.name for init in graph.initializer}
    inputs = [_graph_tensor(v) for v in graph.input if v.name not in initializers]
    return inputs, [_graph_tensor(v) for v in graph.output]


def check_against_model(config: ModelConfig, inputs: list[ModelTensor], outputs: list[ModelTensor]) -> None:
    """Raise LoadError naming the first config tensor that the model contradicts, sequence tensors included."""
    served, taken_back = sequence_tensors(config)
    controls = {c.name for c in config.sequence_batching.control_input} if config.sequence_batching else set()
    expected = [("input", t, inputs) for t in config.input]
    expected += [("control input" if t.name in controls else "state input", t, inputs) for t in served]
    expected += [("output", t, outputs) for t in config.output]
    expected += [("state output", t, outputs) for t in taken_back]
    for role, tensor, actual in expected:
        model = next((t for t in actual if t.name == tensor.name), None)
        if model is None:
            names = ", ".join(t.name for t in actual) or "none"
            kind = role.split()[-1]
            raise LoadError(f"{role} '{tensor.name}' in config is not in the model (model {kind}s: {names})")
        _check_tensor(role, tensor, model, config.max_batch_size)
    if config.input:
        filled = {t.name for t in config.input + served}
        missing = [t.name for t in inputs if t.name not in filled]
        if missing:
            raise LoadError(f"the model needs input '{missing[0]}', which the config does not list")


def _check_tensor(kind: str, tensor: TensorConfig, model: ModelTensor, max_batch_size: int) -> None:
    if tensor.data_type != model.data_type:
        raise LoadError(f"{kind} '{tensor.name}' is {tensor.data_type} in config but {model.data_type} in the model")
    dims = list(model.dims)
    if max_batch_size > 0:
        if not dims or dims[0] != -1:
            raise LoadError(
                f"{kind} '{tensor.name}' has no dynamic batch dimension in the model (dims {dims}), so "
                f"max_batch_size {max_batch_size} cannot batch it; set max_batch_size: 0"
            )
        dims = dims[1:]
    wanted = tensor.reshape if tensor.reshape is not None else tensor.dims
    field = "reshape" if tensor.reshape is not None else "dims"
    # a state's -1 lets its shape change from step to step, so it fits any model dim (Triton checks no state dims)
    free = (-1,) if kind.startswith("state") else ()
    agrees = len(wanted) == len(dims) and all(m in (-1, c) or c in free for c, m in zip(wanted, dims, strict=True))
    if not agrees:
        batch_note = " (batch dimension excluded)" if max_batch_size > 0 else ""
        raise LoadError(
            f"{kind} '{tensor.name}' has {field} {list(wanted)} in config but {dims} in the model{batch_note}"
        )


def _config_tensor(tensor: ModelTensor, skip: int) -> TensorConfig:
    return TensorConfig(name=tensor.name, data_type=tensor.data_type, dims=list(tensor.dims[skip:]))


def _graph_tensor(value: Any) -> ModelTensor:
    """A graph input/output (onnx ValueInfoProto) as a ModelTensor."""
    import onnx

    tensor_type = value.type.tensor_type
    onnx_name = onnx.TensorProto.DataType.Name(tensor_type.elem_type).lower()
    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim)
    return ModelTensor(value.name, _config_type(value.name, onnx_name), dims)


def _session_tensor(arg: Any) -> ModelTensor:
    """An onnxruntime NodeArg (type "tensor(float)", shape with ints, names or None) as a ModelTensor."""
    onnx_name = arg.type.removeprefix("tensor(").removesuffix(")")
    dims = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape or ())
    return ModelTensor(arg.name, _config_type(arg.name, onnx_name), dims)


def _config_type(tensor_name: str, onnx_name: str) -> str:
    try:
        return ONNX_TO_CONFIG_TYPE[onnx_name]
    except KeyError:
        raise LoadError(f"tensor '{tensor_name}' has ONNX type '{onnx_name}', which Infera cannot serve") from None


def _numpy_dtype(config_type: str) -> np.dtype | None:
    try:
        return numpy_dtype(config_to_wire(config_type))
    except ValueError:
        return None


def _to_str_array(name: str, array: np.ndarray) -> np.ndarray:
    """BYTES travel as bytes; onnxruntime wants str (it would stringify bytes as "b'...'")."""
    try:
        items = [item.decode("utf-8") if isinstance(item, bytes) else str(item) for item in array.ravel()]
    except UnicodeDecodeError as exc:
        raise BackendError(f"input '{name}' holds bytes that are not UTF-8, which ONNX strings must be") from exc
    return np.array(items, dtype=object).reshape(array.shape)


def _to_bytes_array(array: np.ndarray) -> np.ndarray:
    """onnxruntime's str elements as the engine's bytes elements."""
    items = [item.encode("utf-8") if isinstance(item, str) else item for item in array.ravel()]
    return np.array(items, dtype=object).reshape(array.shape)
