"""A real server process on a free loopback port (uvicorn or daphne) over a repository of small real models."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.engine.model_factory import (
    make_mlp_onnx,
    make_python_model,
    make_simple_onnx,
    make_simple_string,
    python_config,
    write_model_folder,
)

ROOT = Path(__file__).resolve().parents[3]
GUARD_SIZES = (8, 16, 4)
SERVER_BODY_LIMIT = 1024 * 1024
START_DEADLINE_S = 120

FAILING_SOURCE = textwrap.dedent(
    '''
    """A model whose execute always raises: the server must answer 500 and carry on."""


    class TritonPythonModel:
        def execute(self, requests):
            raise RuntimeError("deliberate failure in execute")
    '''
)


BROKEN_SOURCE = textwrap.dedent(
    '''
    """A model that cannot initialize: the server must report it unavailable, with the reason."""


    class TritonPythonModel:
        def initialize(self, args):
            raise RuntimeError("deliberate failure in initialize")

        def execute(self, requests):
            return []
    '''
)


def make_fp16_double(repo: Path, name: str = "fp16_double") -> Path:
    """FP16 in, FP16 out: OUTPUT0 = INPUT0 * 2, dims [4], batching up to 8."""
    import onnx
    from onnx import TensorProto, helper

    from engine.config.model_config import ModelConfig, TensorConfig

    two = helper.make_tensor("two", TensorProto.FLOAT16, [], [2.0])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["INPUT0", "two"], ["OUTPUT0"])],
        name,
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT16, ["batch", 4])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT16, ["batch", 4])],
        initializer=[two],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    config = ModelConfig(
        name=name,
        platform="onnxruntime_onnx",
        max_batch_size=8,
        input=[TensorConfig("INPUT0", "TYPE_FP16", [4])],
        output=[TensorConfig("OUTPUT0", "TYPE_FP16", [4])],
    )
    onnx.save(model, write_model_folder(repo, config, 1, "model.onnx"))
    return Path(repo) / name


def make_broken(repo: Path, name: str = "broken") -> Path:
    """A python model whose initialize raises: its load fails, so it is never ready."""
    config = python_config(name, [("INPUT0", "TYPE_FP32", [1])], [("OUTPUT0", "TYPE_FP32", [1])])
    return make_python_model(repo, name, BROKEN_SOURCE, config)


IDENTITY_SOURCE = textwrap.dedent(
    '''
    """Echoes INPUT0 as OUTPUT0, whatever its type and shape."""
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            return [
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
                )
                for r in requests
            ]
    '''
)


def make_identity(repo: Path, name: str, data_type: str, dims: list[int], max_batch_size: int) -> Path:
    """A python identity model over one input (raw binary bodies need models with one input)."""
    config = python_config(name, [("INPUT0", data_type, dims)], [("OUTPUT0", data_type, dims)], max_batch_size)
    return make_python_model(repo, name, IDENTITY_SOURCE, config)


def build_repository(repo: Path) -> Path:
    """Every model the server tests use."""
    make_simple_onnx(repo, name="simple")
    make_identity(repo, "bytes_echo", "TYPE_STRING", [1], 8)
    make_identity(repo, "two_wild", "TYPE_FP32", [-1, -1], 0)
    make_identity(repo, "one_wild", "TYPE_FP32", [2, -1], 0)
    make_simple_onnx(repo, name="resizable")
    make_simple_string(repo)
    make_fp16_double(repo)
    make_mlp_onnx(repo, name="guard", sizes=GUARD_SIZES, max_batch_size=8)
    make_broken(repo)
    failing = python_config("failing", [("INPUT0", "TYPE_FP32", [1])], [("OUTPUT0", "TYPE_FP32", [1])])
    make_python_model(repo, "failing", FAILING_SOURCE, failing)
    return repo


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _command(kind: str, port: int) -> list[str]:
    if kind == "uvicorn":
        return [
            sys.executable,
            "-m",
            "uvicorn",
            "engine.frontend.standalone:app",
            "--http",  # as the console serves: /v2 inference answered past uvicorn's ASGI cycle
            "engine.frontend.standalone:DirectProtocol",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ]
    return [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "engine.frontend.standalone:app"]


def _ready(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/v2/health/ready")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


@contextmanager
def running_server(kind: str, repo: Path, log_path: Path, extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """Start `kind` (uvicorn or daphne) on the standalone app; yield its `host:port`; stop it afterwards.

    `extra_env` adds to (or replaces) what the process finds in its environment: a TMPDIR, a gRPC port.
    """
    port = free_port()
    env = dict(os.environ, INFERA_MODEL_REPOSITORY=str(repo), INFERA_MAX_BODY_BYTES=str(SERVER_BODY_LIMIT))
    env["INFERA_OPEN_REPOSITORY_CONTROL"] = "true"  # the engine alone, driven as Triton is: anyone may load
    env["INFERA_GRPC_PORT"] = "0"  # its gRPC front end is tested in process (test_grpc.py)
    env.update(extra_env or {})
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    with open(log_path, "wb") as log:
        process = subprocess.Popen(_command(kind, port), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_DEADLINE_S
            while not _ready(port):  # waiting for start-up, not deciding a test
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{kind} did not become ready:\n{log_path.read_text(errors='replace')}")
                time.sleep(0.2)
            yield f"127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@dataclass
class Served:
    """A server process's two front ends, as tritonclient addresses them (`host:port`)."""

    http_url: str
    grpc_url: str

    def client(self, module: Any) -> Any:
        """A client of tritonclient.http or tritonclient.grpc (`module`) for this server."""
        return module.InferenceServerClient(self.grpc_url if module.__name__.endswith("grpc") else self.http_url)


@contextmanager
def running_with_grpc(repo: Path, log_path: Path, extra_env: dict[str, str] | None = None) -> Iterator[Served]:
    """The standalone app under uvicorn with its gRPC front end on a free port of its own."""
    grpc_port = free_port()
    with running_server("uvicorn", repo, log_path, {**(extra_env or {}), "INFERA_GRPC_PORT": str(grpc_port)}) as url:
        yield Served(url, f"127.0.0.1:{grpc_port}")


@contextmanager
def client_region(size: int = 64) -> Iterator[tuple[str, Any]]:
    """A fresh POSIX shared memory object of `size` bytes, as a client makes one: (its key, tritonclient's handle)."""
    import uuid

    import tritonclient.utils.shared_memory as shm

    key = f"/infera_client_shm_{uuid.uuid4().hex[:12]}"
    handle = shm.create_shared_memory_region("local", key, size)
    try:
        yield key, handle
    finally:
        shm.destroy_shared_memory_region(handle)
