"""The pytorch backend on a CUDA GPU: a stream per instance, inputs up from pinned host buffers, CUDA graphs.

Each instance runs on a CUDA stream of its own, as Triton's PyTorch backend does, so two instances on one GPU overlap
one's copies and host work with the other's kernels instead of queueing on the legacy default stream.

A graph is captured the first time a batch size is seen (at most MAX_GRAPHS sizes), for models whose inputs have one
shape per batch size; later batches of that size copy their inputs into the graph's static tensors and replay it,
one launch instead of one per kernel. The config parameter CUDA_GRAPHS "false" turns graphs off; a model whose
capture fails runs eagerly from then on at that size.

Captures are one at a time in the process (CAPTURES): two instances capturing at once broke both captures on an H200
with torch 2.11 ("operation not permitted when stream is capturing", then "Cannot register the state during
capturing stage"), and the second failure aborted the process when its graph was freed. A capture forbids unsafe CUDA
calls only on its own thread (capture_error_mode "thread_local"), so other instances keep copying and replaying on
their streams meanwhile; what frees device memory (an unload's empty_cache) takes CAPTURES too.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

from engine.backends.base import Device
from engine.backends.gpu_transfers import fixed_shapes
from engine.config import ModelConfig
from engine.settings import FALSE_WORDS

log = logging.getLogger("infera.engine")

MAX_GRAPHS = 8  # batch sizes captured per instance; others run eagerly (each graph keeps its own buffers)
WARMUP_RUNS = 2  # eager runs on a side stream before a capture, as torch's documentation asks
# CUDA's capture state is the process's (torch's generators register each graph), not an instance's: see above
CAPTURES = threading.Lock()


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
        # graphs whose capture failed are kept, never freed: torch 2.11 aborts the process in the destructor of a
        # graph whose capture failed while registering its generator state
        self._failed: list[Any] = []

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
        graph = None
        try:
            with CAPTURES:
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
            if graph is not None:
                self._failed.append(graph)
            return None
        self._graphs[batch] = entry = (graph, static_inputs, static_output)
        return entry
