"""The pytorch backend on a CUDA GPU: a stream per instance, inputs up from pinned host buffers, CUDA graphs.

Each instance runs on a CUDA stream of its own, as Triton's PyTorch backend does, so two instances on one GPU overlap
one's copies and host work with the other's kernels instead of queueing on the legacy default stream.

A graph is captured the first time a batch size is seen (at most MAX_GRAPHS sizes), for models whose inputs have one
shape per batch size; later batches of that size copy their inputs into the graph's static tensors and replay it,
one launch instead of one per kernel. The config parameter CUDA_GRAPHS "false" turns graphs off; a model whose
capture fails runs eagerly from then on at that size. A capture forbids unsafe CUDA calls only on its own thread
(capture_error_mode "thread_local"): another instance's synchronous copy during a capture would otherwise fail that
instance's batch.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from engine.backends.base import Device
from engine.backends.gpu_transfers import fixed_shapes
from engine.config import ModelConfig
from engine.settings import FALSE_WORDS

log = logging.getLogger("infera.engine")

MAX_GRAPHS = 8  # batch sizes captured per instance; others run eagerly (each graph keeps its own buffers)
WARMUP_RUNS = 2  # eager runs on a side stream before a capture, as torch's documentation asks


def instance_stream(torch: Any, device: Device) -> Any | None:
    """A CUDA stream of the instance's own on its GPU; None on the CPU."""
    return torch.cuda.Stream(device=torch.device("cuda", device.id)) if device.is_gpu else None


def on_stream(torch: Any, stream: Any | None) -> contextlib.AbstractContextManager:
    """Make `stream` (and its device) current for this thread while a batch runs: its copies, kernels and graph
    replays go there, and the copy of the outputs back waits for that stream alone."""
    return contextlib.nullcontext() if stream is None else torch.cuda.stream(stream)


def graphs_wanted(device: Device, config: ModelConfig) -> bool:
    """CUDA graphs on a GPU instance of a model with fixed shapes, unless its config says CUDA_GRAPHS "false"."""
    setting = str(config.parameters.get("CUDA_GRAPHS", "true")).strip().lower()
    return device.is_gpu and fixed_shapes(config) and setting not in FALSE_WORDS


class CudaGraphs:
    """Captured graphs of one model on one device, by batch size."""

    def __init__(self, torch: Any, model: Any, max_graphs: int = MAX_GRAPHS) -> None:
        self.torch = torch
        self.model = model
        self.max_graphs = max_graphs
        self._graphs: dict[int, tuple[Any, list[Any], Any]] = {}  # batch -> (graph, static inputs, static output)
        self._eager: set[int] = set()  # sizes that failed to capture, or came after the limit

    @property
    def captured(self) -> list[int]:
        return sorted(self._graphs)

    def run(self, batch: int, arguments: list[Any]) -> Any:
        """The model's result for these device tensors, through the graph of this batch size where there is one."""
        entry = self._graphs.get(batch)
        if entry is None and batch not in self._eager:
            entry = self._capture(batch, arguments)
        if entry is None:
            return self.model(*arguments)
        graph, static_inputs, static_output = entry
        for static, argument in zip(static_inputs, arguments, strict=True):
            static.copy_(argument, non_blocking=True)
        graph.replay()
        return static_output  # read (copied to the host) before the next replay of this size

    def _capture(self, batch: int, arguments: list[Any]) -> tuple[Any, list[Any], Any] | None:
        if len(self._graphs) >= self.max_graphs:
            self._eager.add(batch)
            return None
        torch = self.torch
        static_inputs = [argument.clone() for argument in arguments]
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(WARMUP_RUNS):
                    self.model(*static_inputs)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                static_output = self.model(*static_inputs)
        except Exception as exc:  # noqa: BLE001 - a model that cannot be captured still runs, eagerly
            log.warning("batch size %s runs without a CUDA graph: the capture failed: %s", batch, exc)
            self._eager.add(batch)
            return None
        self._graphs[batch] = entry = (graph, static_inputs, static_output)
        return entry
