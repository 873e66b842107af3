"""System shared memory belongs to the caller that registered it: status, unregister and inference see only one's own
regions, and only objects of the server's own user (and no other caller's) may be registered.

The attacks run against a real `manage.py serve` in token mode, over HTTP and gRPC, with two inference tokens.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from engine.errors import InvalidArgument, NotFound
from engine.protocol.shared_memory import SHM_ROOT, RegionTooLarge, SharedMemoryRegistry, TooManyRegions
from engine.serving.admission import ANONYMOUS, Principal
from engine.settings import SharedMemoryLimits
from tests.conftest import manage_command, serve_process
from tests.engine.model_factory import make_simple_onnx

A = np.arange(16, dtype=np.int32).reshape(1, 16)
ONE = np.ones((1, 16), dtype=np.int32)
PER_CALLER = 4
ALICE = Principal("alice", role="inference", user_id=1, token_id=11)
BOB = Principal("bob", role="inference", user_id=2, token_id=12)


@contextmanager
def shm_object(size: int = 256, mode: int = 0o600) -> Iterator[tuple[str, int]]:
    """A shared memory object as tritonclient makes one (this process's user, 0600): its key and descriptor."""
    name = f"infera_owner_{uuid.uuid4().hex}"
    descriptor = os.open(SHM_ROOT / name, os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.ftruncate(descriptor, size)
        yield f"/{name}", descriptor
    finally:
        os.close(descriptor)
        (SHM_ROOT / name).unlink(missing_ok=True)


def write_inputs(descriptor: int) -> None:
    os.pwrite(descriptor, A.tobytes() + ONE.tobytes(), 0)


# ---- the registry itself: the owner and mode rule, the caps


def test_it_refuses_an_object_of_another_user():
    """As PostgreSQL's own segment or a 0600 object of `nobody`: owned by a user the caller cannot be proven to be."""
    if os.geteuid() != 0:
        pytest.skip("giving an object to another user needs root")
    with shm_object() as (key, descriptor):
        os.fchown(descriptor, 65534, 65534)  # nobody
        with pytest.raises(InvalidArgument, match="must be owned by the server's user"):
            SharedMemoryRegistry().register("stolen", key, 0, 64, caller=ALICE)


def test_it_refuses_postgresqls_own_segment():
    segments = [path for path in SHM_ROOT.glob("PostgreSQL.*") if path.stat().st_uid != os.geteuid()]
    if not segments:
        pytest.skip("no PostgreSQL segment of another user in /dev/shm")
    with pytest.raises(InvalidArgument, match="Unable to open shared memory region"):
        SharedMemoryRegistry().register("pg", f"/{segments[0].name}", 0, 64, caller=ALICE)


def test_it_refuses_an_object_its_owner_may_not_write():
    with shm_object(mode=0o400) as (key, _):
        with pytest.raises(InvalidArgument, match="writable by its owner"):
            SharedMemoryRegistry().register("read_only", key, 0, 64, caller=ALICE)


def test_it_refuses_a_posix_semaphore():
    name = f"sem.infera_{uuid.uuid4().hex}"
    descriptor = os.open(SHM_ROOT / name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(descriptor, 64)
        with pytest.raises(InvalidArgument, match="semaphore"):
            SharedMemoryRegistry().register("lock", f"/{name}", 0, 32, caller=ALICE)
    finally:
        os.close(descriptor)
        (SHM_ROOT / name).unlink()


def test_it_refuses_an_object_another_caller_registered():
    registry = SharedMemoryRegistry()
    with shm_object() as (key, _):
        registry.register("mine", key, 0, 64, caller=ALICE)
        with pytest.raises(InvalidArgument, match="registered by another caller"):
            registry.register("theirs", key, 0, 64, caller=BOB)
        registry.register("mine_too", key, 64, 64, caller=ALICE)  # one's own object twice is fine
        registry.unregister(caller=ALICE)
        registry.register("theirs", key, 0, 64, caller=BOB)  # free again once its registrant let it go
        registry.close()


@pytest.mark.parametrize("key", ["/a\x00b", "/" + "k" * 256])
def test_it_refuses_a_key_no_shared_memory_object_can_have(key):
    with pytest.raises(InvalidArgument, match="is not a shared memory key"):
        SharedMemoryRegistry().register("region", key, 0, 64, caller=ALICE)


def test_it_bounds_a_regions_name():
    """A region's name is kept as long as the region: 1024 names of 64 MB (a gRPC message) would be 64 GB."""
    with shm_object() as (key, _):
        with pytest.raises(InvalidArgument, match="at most 256 characters"):
            SharedMemoryRegistry().register("n" * 257, key, 0, 64, caller=ALICE)


def test_it_scopes_names_status_and_unregister_to_the_caller():
    registry = SharedMemoryRegistry()
    with shm_object() as (key, _), shm_object() as (other_key, _):
        registry.register("in", key, 0, 64, caller=ALICE)
        registry.register("in", other_key, 0, 64, caller=BOB)  # the same name, each their own
        assert [r["key"] for r in registry.status(caller=ALICE)] == [key]
        assert registry.status(caller=ANONYMOUS) == []
        with pytest.raises(NotFound, match="'in'"):
            registry.status("in", caller=ANONYMOUS)
        with pytest.raises(InvalidArgument, match="not registered"):
            registry.get("in", "INPUT0", caller=ANONYMOUS)
        registry.unregister(caller=BOB)  # everything of Bob's, nothing of Alice's
        assert [r["name"] for r in registry.status(caller=ALICE)] == ["in"]
        assert registry.status(caller=BOB) == []
        registry.close()


def test_it_caps_registrations_per_caller_and_in_all():
    registry = SharedMemoryRegistry(SharedMemoryLimits(max_regions=3, max_regions_per_caller=2))
    with shm_object() as (key, _), shm_object() as (other_key, _):
        registry.register("a", key, 0, 8, caller=ALICE)
        registry.register("b", key, 8, 8, caller=ALICE)
        with pytest.raises(TooManyRegions, match="2 shared memory regions registered") as refused:
            registry.register("c", key, 16, 8, caller=ALICE)
        assert refused.value.status == 429
        registry.register("a", other_key, 0, 8, caller=BOB)
        with pytest.raises(TooManyRegions, match="3 shared memory regions"):
            registry.register("b", other_key, 8, 8, caller=BOB)
        registry.close()


def test_it_bounds_a_regions_bytes_and_a_callers_total():
    """50 registrations of a 1 TiB sparse object were 51 TB of virtual memory: a region and a caller are bounded."""
    registry = SharedMemoryRegistry(SharedMemoryLimits(max_region_bytes=1 << 20, max_bytes_per_caller=3 << 19))
    with shm_object(size=1 << 40) as (key, _):
        with pytest.raises(RegionTooLarge, match="at most 1048576 bytes") as refused:
            registry.register("huge", key, 0, 1 << 40, caller=ALICE)
        assert refused.value.status == 413
        registry.register("first", key, 0, 1 << 20, caller=ALICE)
        with pytest.raises(RegionTooLarge, match="1572864 bytes in all"):
            registry.register("second", key, 0, 1 << 20, caller=ALICE)
        registry.close()


# ---- the same attacks against a real server in token mode


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory):
    """`manage.py serve` demanding tokens, `simple` registered; (server, Alice's key, Bob's key)."""
    var_dir = tmp_path_factory.mktemp("shm-owners") / "var"
    make_simple_onnx(var_dir / "models", name="simple")
    env = {
        "INFERA_INFERENCE_AUTH": "token",
        "INFERA_DISABLE_NVML": "1",
        "INFERA_SHM_MAX_REGIONS_PER_CALLER": str(PER_CALLER),
        "INFERA_ALLOW_CLIENT_SHM": "true",  # off by default, as in Triton
    }
    with serve_process(var_dir, "--no-seed", env=env) as server:
        manage = manage_command(var_dir, env)
        manage("import_repository", str(var_dir / "models"))
        manage("create_user", "alice", "--role", "inference")
        manage("create_user", "bob", "--role", "inference")
        alice, bob = manage("issue_token", "alice"), manage("issue_token", "bob")
        client = httpclient.InferenceServerClient(server.base_url.removeprefix("http://"))
        for _ in range(1200):
            if client.is_model_ready("simple", headers=auth(alice)):
                break
            threading.Event().wait(0.05)  # polling a server process that loads on its own
        else:
            pytest.fail("simple never became ready")
        yield server, alice, bob


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def grpc_auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def http_client(server) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.base_url.removeprefix("http://"))


def shm_request(region: str, output_region: str) -> tuple[list, list]:
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory(region, 64)
    inputs[1].set_shared_memory(region, 64, offset=64)
    output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
    output.set_shared_memory(output_region, 64)
    return inputs, [output]


@pytest.mark.server
def test_another_token_sees_uses_and_removes_none_of_a_callers_regions(token_server):
    server, alice, bob = token_server
    client = http_client(server)
    with shm_object() as (key, descriptor), shm_object() as (bob_key, bob_descriptor):
        write_inputs(descriptor)
        client.register_system_shared_memory("alice_io", key, 256, headers=auth(alice))
        try:
            assert client.get_system_shared_memory_status(headers=auth(bob)) == []
            with pytest.raises(InferenceServerException) as hidden:
                client.get_system_shared_memory_status("alice_io", headers=auth(bob))
            assert hidden.value.status() == "404"
            with pytest.raises(InferenceServerException, match="'alice_io', which is not registered"):
                inputs, outputs = shm_request("alice_io", "alice_io")
                client.infer("simple", inputs, outputs=outputs, headers=auth(bob))
            client.unregister_system_shared_memory("alice_io", headers=auth(bob))
            client.unregister_system_shared_memory(headers=auth(bob))  # "all": all of Bob's, none of Alice's
            # Bob points a region of the same name at his own object: Alice's outputs still go to hers
            client.register_system_shared_memory("alice_io", bob_key, 256, headers=auth(bob))
            inputs, outputs = shm_request("alice_io", "alice_io")
            outputs[0].set_shared_memory("alice_io", 64, offset=128)
            client.infer("simple", inputs, outputs=outputs, headers=auth(alice))
            assert np.frombuffer(os.pread(descriptor, 64, 128), np.int32).tolist() == (A + 1).ravel().tolist()
            assert os.pread(bob_descriptor, 64, 128) == bytes(64)
            assert [r["key"] for r in client.get_system_shared_memory_status(headers=auth(alice))] == [key]
            with pytest.raises(InferenceServerException, match="registered by another caller"):
                client.register_system_shared_memory("stolen", key, 256, headers=auth(bob))
        finally:
            client.unregister_system_shared_memory(headers=auth(alice))
            client.unregister_system_shared_memory(headers=auth(bob))


@pytest.mark.server
def test_over_grpc_another_token_sees_and_removes_none_of_a_callers_regions(token_server):
    server, alice, bob = token_server
    client = grpcclient.InferenceServerClient(server.grpc_address)
    with shm_object() as (key, _):
        client.register_system_shared_memory("alice_grpc", key, 256, headers=grpc_auth(alice))
        try:
            assert not client.get_system_shared_memory_status(headers=grpc_auth(bob)).regions
            with pytest.raises(InferenceServerException) as hidden:
                client.get_system_shared_memory_status("alice_grpc", headers=grpc_auth(bob))
            assert hidden.value.status() == "StatusCode.NOT_FOUND"
            client.unregister_system_shared_memory(headers=grpc_auth(bob))
            inputs = [
                grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
                grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
            ]
            inputs[0].set_shared_memory("alice_grpc", 64)
            inputs[1].set_shared_memory("alice_grpc", 64, offset=64)
            with pytest.raises(InferenceServerException, match="not registered") as refused:
                client.infer("simple", inputs, headers=grpc_auth(bob))
            assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
            assert "alice_grpc" in client.get_system_shared_memory_status(headers=grpc_auth(alice)).regions
        finally:
            client.unregister_system_shared_memory(headers=grpc_auth(alice))


@pytest.mark.server
def test_a_real_server_refuses_other_users_objects_and_caps_a_caller(token_server):
    server, alice, _ = token_server
    client = http_client(server)
    if os.geteuid() == 0:
        with shm_object() as (key, descriptor):
            os.fchown(descriptor, 65534, 65534)
            with pytest.raises(InferenceServerException, match="must be owned by the server's user"):
                client.register_system_shared_memory("nobody", key, 64, headers=auth(alice))
    with shm_object(size=1 << 40) as (key, _):
        with pytest.raises(InferenceServerException) as too_large:
            client.register_system_shared_memory("sparse", key, 1 << 40, headers=auth(alice))
        assert too_large.value.status() == "413"
        try:
            for index in range(PER_CALLER):
                client.register_system_shared_memory(f"r{index}", key, 64, offset=64 * index, headers=auth(alice))
            with pytest.raises(InferenceServerException) as too_many:
                client.register_system_shared_memory("one_more", key, 64, headers=auth(alice))
            assert too_many.value.status() == "429"
        finally:
            client.unregister_system_shared_memory(headers=auth(alice))
