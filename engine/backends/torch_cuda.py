"""The pytorch backend on a CUDA GPU: a stream per instance, inputs up from pinned host buffers, CUDA graphs.

Each instance runs on a CUDA stream of its own, as Triton's PyTorch backend does, so two instances on one GPU overlap
one's copies and host work with the other's kernels instead of queueing on the legacy default stream.

For models whose inputs have one shape per batch size, a graph is captured the first time a batch needs its size;
later batches copy their inputs into the graph's static tensors and replay it, one launch instead of one per kernel.
A batching model's batches are padded up to power-of-two buckets (CudaGraphs); the config parameter CUDA_GRAPHS
"exact" captures each size as it comes instead (at most MAX_GRAPHS), "false" turns graphs off. A size whose capture
fails runs eagerly from then on.

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
from engine.config.model_config import ModelConfig
from engine.environment.values import FALSE_WORDS

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
    return device.is_gpu and fixed_shapes(config) and graphs_setting(config) not in FALSE_WORDS


def graphs_setting(config: ModelConfig) -> str:
    return str(config.parameters.get("CUDA_GRAPHS", "true")).strip().lower()


def batch_buckets(config: ModelConfig) -> list[int] | None:
    """The batch sizes graphs are captured at, each batch padded up to the next: powers of two up to
    max_batch_size, and max_batch_size itself. None captures every size exactly as it comes: a model that does not
    batch, or whose config says CUDA_GRAPHS "exact" (a model whose rows depend on each other, which padding rows
    would change)."""
    if config.max_batch_size <= 0 or graphs_setting(config) == "exact":
        return None
    sizes, size = [], 1
    while size < config.max_batch_size:
        sizes.append(size)
        size *= 2
    return [*sizes, config.max_batch_size]


class CudaGraphs:
    """Captured graphs of one model on one device, by batch size.

    With buckets, a batch of n rows replays the graph of the smallest bucket >= n: its first n rows are the batch,
    the rest zeros, and the first n rows of the output are returned. A batcher that forms batches of every size
    then costs at most log2(max_batch_size) + 2 captures, each taken once, instead of a capture (hundreds of ms on
    a ResNet-50, bench/gpu.sh) for every new size and eager runs past MAX_GRAPHS. The graphs of one instance share
    one memory pool: they replay one at a time on its stream and their outputs are copied out before the next.
    """

    def __init__(self, torch: Any, model: Any, max_graphs: int = MAX_GRAPHS, buckets: list[int] | None = None) -> None:
        self.torch = torch
        self.model = model
        self.buckets = buckets
        self.max_graphs = max(max_graphs, len(buckets)) if buckets else max_graphs
        self._graphs: dict[int, tuple[Any, list[Any], Any]] = {}  # batch -> (graph, static inputs, static output)
        self._eager: set[int] = set()  # sizes that failed to capture, or came after the limit
        # graphs whose capture failed are kept, never freed: torch 2.11 aborts the process in the destructor of a
        # graph whose capture failed while registering its generator state
        self._failed: list[Any] = []
        self._pool: Any = None

    @property
    def captured(self) -> list[int]:
        return sorted(self._graphs)

    def size_for(self, batch: int) -> int:
        """The graph size a batch of `batch` rows runs at."""
        if self.buckets is None:
            return batch
        return next((size for size in self.buckets if size >= batch), batch)

    def run(self, batch: int, arguments: list[Any]) -> Any:
        """The model's result for these device tensors, through the graph of this batch size where there is one."""
        size = self.size_for(batch)
        entry = self._graphs.get(size)
        if entry is None and size not in self._eager:
            entry = self._capture(size, [self._padded(argument, size) for argument in arguments])
        if entry is None:
            return self.model(*arguments)
        graph, static_inputs, static_output = entry
        for static, argument in zip(static_inputs, arguments, strict=True):
            static[:batch].copy_(argument, non_blocking=True)
            if batch < size:
                static[batch:].zero_()
        graph.replay()
        # read (copied to the host) before the next replay of any graph of this instance
        return static_output if batch == size else first_rows(static_output, batch)

    def _padded(self, argument: Any, size: int) -> Any:
        """The capture's example input: the first batch of this size's rows, then zeros."""
        if len(argument) == size:
            return argument
        padded = self.torch.zeros((size, *argument.shape[1:]), dtype=argument.dtype, device=argument.device)
        padded[: len(argument)].copy_(argument)
        return padded

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
                with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                    static_output = self.model(*static_inputs)
                self._pool = graph.pool()
        except Exception as exc:  # noqa: BLE001 - a model that cannot be captured still runs, eagerly
            log.warning("batch size %s runs without a CUDA graph: the capture failed: %s", batch, exc)
            self._eager.add(batch)
            if graph is not None:
                self._failed.append(graph)
            return None
        self._graphs[batch] = entry = (graph, static_inputs, static_output)
        return entry


def first_rows(result: Any, rows: int) -> Any:
    """The first `rows` rows of each tensor of a model's result (a tensor, a tuple or list, or a dict)."""
    if isinstance(result, dict):
        return {name: value[:rows] for name, value in result.items()}
    if isinstance(result, (tuple, list)):
        return type(result)(value[:rows] for value in result)
    return result[:rows]
