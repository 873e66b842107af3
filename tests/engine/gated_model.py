"""A python model that runs each batch only when the test lets it: slow on demand, with no sleep anywhere.

Two named pipes in a folder of the test's: the model writes its stub's pid to `started` when a batch begins, then
reads one byte from `gate` before it answers. `release(n)` lets n batches finish; `wait_started()` returns the pid
of the stub that began one. The model opens both pipes read-write, so neither side ever blocks on opening them.
"""

from __future__ import annotations

import os
import select
import textwrap
from pathlib import Path

from tests.engine.model_factory import make_python_model, python_config

SOURCE = textwrap.dedent(
    '''
    """Echoes INPUT0 once the test writes a byte to the gate; says when a batch starts (with its pid)."""
    import os

    import triton_python_backend_utils as pb_utils

    GATE = {gate!r}
    STARTED = {started!r}


    class TritonPythonModel:
        def initialize(self, args):
            self.gate = os.open(GATE, os.O_RDWR)
            self.started = os.open(STARTED, os.O_RDWR)

        def execute(self, requests):
            os.write(self.started, b"%d\\n" % os.getpid())
            os.read(self.gate, 1)
            return [
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
                )
                for r in requests
            ]
    '''
)


class GatedModel:
    """The pipes of one gated model; `write(repo)` adds the model (one instance) to a repository."""

    def __init__(self, folder: Path, name: str = "gated") -> None:
        self.name = name
        folder.mkdir(parents=True, exist_ok=True)
        self.gate = folder / f"{name}.gate"
        self.started = folder / f"{name}.started"
        for pipe in (self.gate, self.started):
            if not pipe.exists():
                os.mkfifo(pipe)
        self._started_fd: int | None = None
        self._lines = b""

    def write(self, repo: Path, *, max_batch_size: int = 1, extra_config: str = "") -> Path:
        tensors = ([("INPUT0", "TYPE_FP32", [1])], [("OUTPUT0", "TYPE_FP32", [1])])
        config = python_config(self.name, *tensors, max_batch_size)
        extra = "instance_group [{ count: 1, kind: KIND_CPU }]\n" + extra_config
        source = SOURCE.format(gate=str(self.gate), started=str(self.started))
        return make_python_model(repo, self.name, source, config, extra_config=extra)

    def release(self, batches: int = 1) -> None:
        """Let `batches` batches (started or still to start) finish."""
        fd = os.open(self.gate, os.O_WRONLY | os.O_NONBLOCK)  # the loaded model holds the other end open
        try:
            os.write(fd, b"x" * batches)
        finally:
            os.close(fd)

    def wait_started(self, timeout: float = 60.0) -> int:
        """The pid of the stub that started the next batch; fails after `timeout` seconds without one."""
        if self._started_fd is None:
            self._started_fd = os.open(self.started, os.O_RDWR | os.O_NONBLOCK)
        while b"\n" not in self._lines:
            readable, _, _ = select.select([self._started_fd], [], [], timeout)
            if not readable:
                raise TimeoutError(f"no batch of '{self.name}' started within {timeout} s")
            self._lines += os.read(self._started_fd, 4096)
        line, self._lines = self._lines.split(b"\n", 1)
        return int(line)

    def forget_started(self) -> None:
        """Drop the start lines of batches that already ran (each batch writes one, whether a test waited on it or
        not): the next `wait_started` then sees a batch that starts from now on. Every earlier batch wrote its line
        before it read the gate, so no old line can still be on its way."""
        if self._started_fd is None:
            self._started_fd = os.open(self.started, os.O_RDWR | os.O_NONBLOCK)
        while select.select([self._started_fd], [], [], 0)[0]:
            os.read(self._started_fd, 4096)
        self._lines = b""

    def close(self) -> None:
        if self._started_fd is not None:
            os.close(self._started_fd)
            self._started_fd = None
