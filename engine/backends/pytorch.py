"""The pytorch backend: TorchScript `model.pt` and torch.export `model.pt2`, with torch imported only here, lazily.

Nothing at module level imports torch, so the engine starts fast and torch loads when a torch model does.
"""

from __future__ import annotations

import logging
import re
import warnings
from typing import Any

import numpy as np

from engine.backends import register_backend
from engine.backends.base import Backend
from engine.backends.gpu_transfers import pinned_buffers
from engine.backends.tensor_layout import int_parameter, sequence_tensors, to_config_shape, to_model_shape
from engine.backends.torch_cuda import (
    CAPTURES,
    CudaGraphs,
    batch_buckets,
    graphs_wanted,
    instance_stream,
    on_stream,
)
from engine.config.datatypes import config_to_wire, numpy_dtype
from engine.config.model_config import ModelConfig, TensorConfig
from engine.errors import BackendError, LoadError

log = logging.getLogger("infera.engine")

# Triton's PyTorch backend names tensors INPUT__0, OUTPUT__1: the suffix is the position in forward()/the result
_INDEXED_NAME = re.compile(r"__(\d+)$")


def positional_order(tensors: list[TensorConfig]) -> list[TensorConfig]:
    """Config tensors in the model's positional order: by their `__<index>` suffix when all have one."""
    indices = [_INDEXED_NAME.search(t.name) for t in tensors]
    if tensors and all(indices):
        return [t for _, t in sorted(zip((int(m.group(1)) for m in indices), tensors, strict=True))]
    return list(tensors)


@register_backend
class PyTorchBackend(Backend):
    """Runs a TorchScript or torch.export model under torch.inference_mode on the instance's device."""

    name = "pytorch"

    @classmethod
    def code_in(cls, config: ModelConfig) -> str | None:
        # torch.export.load unpickles parts of the archive with weights_only=False: a crafted .pt2 runs its code.
        # TorchScript (.pt) is read by torch's own restricted loader and is treated as data.
        if config.model_filename.endswith(".pt2"):
            return f"{config.model_filename} is a torch.export archive, which torch unpickles: it can run code"
        return None

    def load(self) -> None:
        import torch

        self.require_model_file()
        # control and state inputs are arguments of forward() and state outputs part of its result, like the rest
        served, taken_back = sequence_tensors(self.config)
        declared = {t.name for t in self.config.output}
        extra_outputs = [t for t in taken_back if t.name not in declared]
        for tensor in self.config.input + served + self.config.output + extra_outputs:
            if tensor.data_type == "TYPE_STRING":
                raise LoadError(f"the pytorch backend cannot serve TYPE_STRING tensor '{tensor.name}'")
        self.torch_device = self._torch_device(torch)
        self._set_threads(torch)
        try:
            if self.model_path.suffix == ".pt2":
                self.model = torch.export.load(str(self.model_path)).module().to(self.torch_device)
            else:
                # TorchScript is deprecated in torch but is Triton's `model.pt` format; the notice helps no user
                warnings.filterwarnings("ignore", r"`torch\.jit\.load` is deprecated", DeprecationWarning)
                self.model = torch.jit.load(str(self.model_path), map_location=self.torch_device)
                self.model.eval()
        except Exception as exc:
            raise LoadError(f"torch could not load '{self.model_path.name}': {exc}") from exc
        self._inputs = positional_order(self.config.input + served)
        self._outputs = positional_order(self.config.output + extra_outputs)
        self._batched = self.config.max_batch_size > 0
        # on a GPU: a stream of the instance's own, inputs staged in pinned host memory (an asynchronous DMA each),
        # fixed shapes through CUDA graphs
        self._stream = instance_stream(torch, self.device)
        self._pinned = pinned_buffers(self.device)
        wanted = graphs_wanted(self.device, self.config) and not served
        self._graphs = CudaGraphs(torch, self.model, buckets=batch_buckets(self.config)) if wanted else None

    def _torch_device(self, torch: Any) -> Any:
        if not self.device.is_gpu:
            return torch.device("cpu")
        if not torch.cuda.is_available():
            raise LoadError(
                f"instance on GPU {self.device.id} needs CUDA; torch {torch.__version__} sees no CUDA device"
            )
        if self.device.id >= torch.cuda.device_count():
            raise LoadError(f"GPU {self.device.id} does not exist (torch sees {torch.cuda.device_count()})")
        return torch.device("cuda", self.device.id)

    def _set_threads(self, torch: Any) -> None:
        """Triton's INTRA_OP/INTER_OP_THREAD_COUNT parameters; torch's thread pools are process-wide."""
        intra = int_parameter(self.config, "INTRA_OP_THREAD_COUNT", "intra_op_thread_count")
        inter = int_parameter(self.config, "INTER_OP_THREAD_COUNT", "inter_op_thread_count")
        if intra:
            torch.set_num_threads(intra)
        if inter and inter != torch.get_num_interop_threads():
            try:
                torch.set_num_interop_threads(inter)
            except RuntimeError as exc:  # torch allows it once, before any inter-op work has started
                log.warning("model '%s': inter-op threads stay at %s: %s", self.config.name, inter, exc)

    def prepare(self, requests: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """On a GPU, several requests are gathered straight into the pinned buffers the batch goes up from."""
        if self._pinned is None or len(requests) == 1:
            return super().prepare(requests)
        return {name: self._pinned.gather(name, [r[name] for r in requests]) for name in requests[0]}

    def execute(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        missing = [t.name for t in self._inputs if t.name not in batch and not t.optional]
        if missing:
            raise BackendError(f"model '{self.config.name}' needs input '{missing[0]}'")
        with on_stream(torch, self._stream):
            arguments = [self._to_tensor(torch, batch[t.name], t) if t.name in batch else None for t in self._inputs]
            try:
                with torch.inference_mode():
                    if self._graphs is not None:
                        result = self._graphs.run(len(arguments[0]) if self._batched else 1, arguments)
                    else:
                        result = self.model(*arguments)
            except Exception as exc:
                raise BackendError(f"torch failed running model '{self.config.name}': {exc}") from exc
            return self._to_outputs(result)  # the copy back waits for this instance's stream

    def _to_tensor(self, torch: Any, array: np.ndarray, tensor: TensorConfig) -> Any:
        array = to_model_shape(array, tensor, self._batched)
        dtype = numpy_dtype(config_to_wire(tensor.data_type))
        if array.dtype != dtype:
            array = array.astype(dtype)
        if self._pinned is not None and dtype.name != "bfloat16":  # a DMA; the outputs' copy back waits for it
            return self._pinned.tensor(torch, tensor.name, array).to(self.torch_device, non_blocking=True)
        if not array.flags.writeable or not array.flags.c_contiguous:
            array = np.ascontiguousarray(array).copy()  # torch only wraps writable memory without a warning
        if dtype.name == "bfloat16":  # numpy's ml_dtypes bfloat16 reaches torch as its bits
            return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16).to(self.torch_device)
        return torch.from_numpy(array).to(self.torch_device)

    def _to_outputs(self, result: Any) -> dict[str, np.ndarray]:
        if isinstance(result, dict):
            values = [result.get(t.name) for t in self._outputs]
        elif isinstance(result, (tuple, list)):
            values = list(result)
        else:
            values = [result]
        if len(values) < len(self._outputs):
            raise BackendError(
                f"model '{self.config.name}' returned {len(values)} output(s), the config lists {len(self._outputs)}"
            )
        outputs = {}
        for tensor, value in zip(self._outputs, values, strict=False):
            if value is None:
                raise BackendError(f"model '{self.config.name}' returned no output '{tensor.name}'")
            outputs[tensor.name] = to_config_shape(_to_numpy(value), tensor, self._batched)
        return outputs

    def unload(self) -> None:
        self.model = None
        self._graphs = None
        self._stream = None
        if self._pinned is not None:
            self._pinned.close()
        if self.device.is_gpu:
            import torch

            with CAPTURES:  # freeing device memory during another instance's capture would break that capture
                torch.cuda.empty_cache()


def _to_numpy(value: Any) -> np.ndarray:
    import torch

    value = value.detach().cpu()
    if value.dtype == torch.bfloat16:
        from ml_dtypes import bfloat16

        return value.view(torch.int16).numpy().view(bfloat16)
    return value.numpy()
