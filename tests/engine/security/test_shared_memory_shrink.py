"""A shared memory object that shrinks under its registered region answers 400 naming the region; the server lives.

The server used to map the whole object and read inputs through the mapping: a client that registered a region,
then shrank the object with ftruncate and sent an inference request, killed the process with SIGBUS.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from engine.errors import InvalidArgument
from engine.protocol.shared_memory import SHM_ROOT, SharedMemoryRegistry
from tests.conftest import manage_command, serve_process
from tests.engine.model_factory import make_simple_onnx

A = np.arange(16, dtype=np.int32).reshape(1, 16)
ONE = np.ones((1, 16), dtype=np.int32)


@contextmanager
def shm_object(size: int = 256) -> Iterator[tuple[str, int]]:
    name = f"infera_shrink_{uuid.uuid4().hex}"
    descriptor = os.open(SHM_ROOT / name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(descriptor, size)
        os.pwrite(descriptor, A.tobytes() + ONE.tobytes(), 0)
        yield f"/{name}", descriptor
    finally:
        os.close(descriptor)
        (SHM_ROOT / name).unlink(missing_ok=True)


def test_it_refuses_to_read_or_write_past_the_end_of_a_shrunk_object():
    registry = SharedMemoryRegistry()
    with shm_object() as (key, descriptor):
        registry.register("io", key, 0, 256)
        region = registry.get("io", "INPUT0")
        assert bytes(region.read(0, 64, "INPUT0")) == A.tobytes()
        os.ftruncate(descriptor, 32)
        with pytest.raises(InvalidArgument, match="region 'io'.*shrank"):
            region.read(0, 64, "INPUT0")
        with pytest.raises(InvalidArgument, match="region 'io'.*shrank"):
            region.write(128, b"\x01" * 64, "OUTPUT0")
        assert os.fstat(descriptor).st_size == 32  # a refused write does not grow the object back
        registry.close()


def test_it_reads_a_copy_that_a_later_write_to_the_object_does_not_change():
    registry = SharedMemoryRegistry()
    with shm_object() as (key, descriptor):
        registry.register("io", key, 0, 256)
        read = registry.get("io", "INPUT0").read(0, 64, "INPUT0")
        os.pwrite(descriptor, bytes(64), 0)
        assert bytes(read) == A.tobytes()
        registry.close()


def test_it_keeps_a_descriptor_open_until_the_copy_using_it_ends():
    """Closed under a copy, the descriptor's number could be reused by another file (the database) and read from."""
    registry = SharedMemoryRegistry()
    with shm_object() as (key, _):
        registry.register("io", key, 0, 256)
        region = registry.get("io", "INPUT0")
        with region._descriptor() as descriptor:  # a copy under way on another thread
            registry.unregister("io")
            assert os.fstat(descriptor).st_size == 256  # still this object, still open
        assert region.descriptor == -1
        with pytest.raises(InvalidArgument, match="'io' was unregistered"):
            region.read(0, 64, "INPUT0")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """`manage.py serve` with its defaults (loopback, no token) serving `simple` and `other`."""
    var_dir = tmp_path_factory.mktemp("shm-shrink") / "var"
    make_simple_onnx(var_dir / "models", name="simple")
    make_simple_onnx(var_dir / "models", name="other")
    env = {"INFERA_DISABLE_NVML": "1", "INFERA_ALLOW_CLIENT_SHM": "true"}  # client shm is off by default, as in Triton
    with serve_process(var_dir, "--no-seed", env=env) as running:
        manage_command(var_dir, {"INFERA_DISABLE_NVML": "1"})("import_repository", str(var_dir / "models"))
        client = httpclient.InferenceServerClient(running.base_url.removeprefix("http://"))
        for _ in range(1200):
            if client.is_model_ready("simple") and client.is_model_ready("other"):
                break
            threading.Event().wait(0.05)  # polling a server process that loads on its own
        else:
            pytest.fail("the models never became ready")
        yield running, client


def plain_inputs() -> list[httpclient.InferInput]:
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(A)
    inputs[1].set_data_from_numpy(ONE)
    return inputs


def assert_still_serving(server, client: httpclient.InferenceServerClient) -> None:
    assert server.process.poll() is None, server.log()[-4000:]
    for model in ("simple", "other"):
        result = client.infer(model, plain_inputs())
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + 1)


@pytest.mark.server
@pytest.mark.parametrize("side", ["input", "output"])
def test_a_shrunk_region_answers_400_naming_it_and_the_server_lives(server, side):
    running, client = server
    region = f"shrinking_{side}"
    with shm_object() as (key, descriptor):
        client.register_system_shared_memory(region, key, 256)
        try:
            os.ftruncate(descriptor, 0)
            inputs, outputs = plain_inputs(), None
            if side == "input":
                inputs[0].set_shared_memory(region, 64)
                inputs[1].set_shared_memory(region, 64, offset=64)
            else:
                outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
                outputs[0].set_shared_memory(region, 64, offset=128)
            with pytest.raises(InferenceServerException) as refused:
                client.infer("simple", inputs, outputs=outputs)
            assert refused.value.status() == "400"
            assert f"'{region}'" in refused.value.message() and "shrank" in refused.value.message()
            assert os.fstat(descriptor).st_size == 0  # a refused output is not written past the end either
        finally:
            client.unregister_system_shared_memory(region)
    assert_still_serving(running, client)


ROWS = 8 * 1024  # 2 x 512 KiB of INT32 in, 512 KiB out: each copy over what the loop may do
SIZE = ROWS * 16 * 4


@pytest.fixture
async def big_engine(tmp_path, monkeypatch):
    """An engine serving `simple` with room for ROWS rows, and a list of (copy, thread) of each shm copy it makes."""
    from engine.protocol.shared_memory import Region
    from engine.serving.server import InferenceServer
    from engine.settings import EngineSettings, SharedMemoryLimits

    make_simple_onnx(tmp_path, name="simple", max_batch_size=ROWS)
    # client shared memory is off by default, as in Triton
    settings = EngineSettings(shared_memory=SharedMemoryLimits(allowed=True))
    server = InferenceServer(tmp_path, gpu_count=0, settings=settings)
    await server.start()
    copies: list[tuple[str, str]] = []
    for method in ("read", "write"):
        original = getattr(Region, method)

        def recording(self, *args, _original=original, _method=method):
            copies.append((_method, threading.current_thread().name))
            return _original(self, *args)

        monkeypatch.setattr(Region, method, recording)
    yield server, copies
    await server.stop()


def assert_copied_off_the_loop(copies: list[tuple[str, str]]) -> None:
    assert [method for method, _ in copies] == ["read", "read", "write"]
    assert all(thread != threading.current_thread().name for _, thread in copies), copies


async def test_it_copies_large_shared_memory_tensors_off_the_event_loop(big_engine):
    """A copy costs what its bytes cost now (no mapping): a small body naming a big region must not stall the loop."""
    from engine.frontend import V2App
    from tests.engine.frontend.asgi_client import call

    server, copies = big_engine
    app = V2App(server)
    with shm_object(SIZE * 3) as (key, _):
        register = orjson.dumps({"key": key, "offset": 0, "byte_size": SIZE * 3})
        assert (await call(app, "POST", "/v2/systemsharedmemory/region/big/register", register)).status == 200

        def placed(index: int) -> dict:
            return {
                "shared_memory_region": "big",
                "shared_memory_byte_size": SIZE,
                "shared_memory_offset": SIZE * index,
            }

        body = {
            "inputs": [
                {"name": f"INPUT{i}", "datatype": "INT32", "shape": [ROWS, 16], "parameters": placed(i)} for i in (0, 1)
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": placed(2)}],
        }
        answer = await call(app, "POST", "/v2/models/simple/infer", orjson.dumps(body))
        assert answer.status == 200, answer.body
    assert_copied_off_the_loop(copies)


async def test_over_grpc_it_copies_large_shared_memory_tensors_off_the_event_loop(big_engine):
    import tritonclient.grpc as grpcclient
    import tritonclient.grpc.aio as aioclient

    from engine.frontend.grpc_server import GrpcFrontEnd
    from engine.settings import GrpcSettings

    server, copies = big_engine
    front_end = GrpcFrontEnd(server, GrpcSettings(port=0, shutdown_grace_seconds=1))
    await front_end.start()
    client = aioclient.InferenceServerClient(f"127.0.0.1:{front_end.port}")
    try:
        with shm_object(SIZE * 3) as (key, _):
            await client.register_system_shared_memory("big", key, SIZE * 3)
            inputs = [grpcclient.InferInput(f"INPUT{i}", [ROWS, 16], "INT32") for i in (0, 1)]
            for index, infer_input in enumerate(inputs):
                infer_input.set_shared_memory("big", SIZE, offset=SIZE * index)
            output = grpcclient.InferRequestedOutput("OUTPUT0")
            output.set_shared_memory("big", SIZE, offset=SIZE * 2)
            await client.infer("simple", inputs, outputs=[output])
    finally:
        await client.close()
        await front_end.stop()
    assert_copied_off_the_loop(copies)
