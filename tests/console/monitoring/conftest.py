"""Fixtures of the console monitoring tests: users by role, a sampler over stand-in served versions, and a real
engine serving an ensemble."""

from __future__ import annotations

import os
import threading
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import orjson
import pytest
from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model

from console.accounts.roles import set_role
from console.demo.sequences import write_sequence_models
from console.monitoring.cluster import ClusterView
from console.peers.identity import ProcessIdentity
from deploy.cluster import ClusterError, LocalCluster
from engine.monitoring.sampler import MetricsSampler
from engine.serving.server import InferenceServer
from engine.types import InferenceRequest
from tests.conftest import ServerProcess, serve_process
from tests.engine.ensembles.test_ensembles import step, write_ensemble
from tests.engine.model_factory import make_simple_onnx
from tests.engine.monitoring.stand_ins import FIXED_DEVICES, FakeClock, Served, ServedVersions


@pytest.fixture
def user_with_role():
    """`await user_with_role("viewer")`: a new user holding that role (None: no role at all)."""

    @database_sync_to_async
    def make(role: str | None, username: str | None = None):
        user = get_user_model().objects.create_user(username or f"user-{role}", password="pw-for-tests-123")
        if role is not None:
            set_role(user, role)
        return user

    return make


ALONE = ProcessIdentity.single("infera-test")  # a stand-in runtime's process: alone, no cluster view


class SampledServer:
    """A sampler over stand-in versions with a hand clock; `tick()` samples one second later."""

    def __init__(self, *served: Served) -> None:
        self.clock = FakeClock()
        self.versions = ServedVersions(*served)
        self.sampler = MetricsSampler(self.versions, clock=self.clock, wall_clock=lambda: self.clock.now)

    @property
    def runtime(self) -> SimpleNamespace:
        """What a consumer finds under the scope's runtime key: the sampler it reads its backlog from (and no
        engine: stand-in versions have no configs, so no ensembles)."""
        return SimpleNamespace(
            sampler=self.sampler, server=None, cluster=ClusterView(ALONE, self.sampler, enabled=False), identity=ALONE
        )

    def tick(self) -> dict:
        self.clock.advance(1.0)
        return self.sampler.sample(devices=FIXED_DEVICES)


@pytest.fixture
def sampled(in_memory_layer) -> Iterator[SampledServer]:
    yield SampledServer(Served("alpha", 1), Served("beta", 1), Served("beta", 2))


class SampledEnsemble:
    """A real engine serving the ensemble `pair` (step 0 calls `first`, step 1 `second`), sampled on a hand clock."""

    def __init__(self, server: InferenceServer) -> None:
        self.server = server
        self.clock = FakeClock()
        self.sampler = MetricsSampler(server, clock=self.clock, wall_clock=lambda: self.clock.now)
        self.sampler.sample(devices=FIXED_DEVICES)  # the baseline: the next sample counts from here

    @property
    def runtime(self) -> SimpleNamespace:
        """What a consumer finds under the scope's runtime key: this engine and its sampler."""
        return SimpleNamespace(
            sampler=self.sampler,
            server=self.server,
            cluster=ClusterView(ALONE, self.sampler, enabled=False),
            identity=ALONE,
        )

    async def infer(self, model: str, times: int) -> None:
        inputs = {"A": np.arange(16, dtype=np.int32).reshape(1, 16), "B": np.ones((1, 16), np.int32)}
        if model != "pair":
            inputs = {"INPUT0": inputs["A"], "INPUT1": inputs["B"]}
        for _ in range(times):
            await self.server.infer(InferenceRequest(model_name=model, inputs=inputs, batch_size=1))

    def tick(self) -> dict:
        """One sample, a second after the one before: its rates are the interval's counts."""
        self.clock.advance(1.0)
        return self.sampler.sample(devices=FIXED_DEVICES)


def write_pair(repo: Path) -> Path:
    """`first` and `second` (Triton's simple model) and the ensemble `pair` chaining them."""
    for name in ("first", "second"):
        make_simple_onnx(repo, name=name, extra_config="dynamic_batching { }\n")
    chain = [
        step("first", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"}),
        step("second", {"INPUT0": "SUM", "INPUT1": "DIFF"}, {"OUTPUT0": "TWICE_A"}),
    ]
    write_ensemble(repo, "pair", ["A", "B"], ["TWICE_A"], chain)
    return repo


@pytest.fixture
async def ensemble(tmp_path: Path) -> AsyncIterator[SampledEnsemble]:
    server = InferenceServer(write_pair(tmp_path), gpu_count=0)
    await server.start()
    try:
        yield SampledEnsemble(server)
    finally:
        await server.stop()


@pytest.fixture(scope="package")
def monitoring_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real `manage.py serve` with Triton's `simple` model and NVML switched off (no GPU, as on most CI)."""
    var_dir = tmp_path_factory.mktemp("monitoring") / "var"
    make_simple_onnx(var_dir / "models")
    write_sequence_models(var_dir / "models", ("simple_sequence_onnx",))
    environment = {"INFERA_DISABLE_NVML": "1", "INFERA_INFERENCE_AUTH": "none"}
    with serve_process(var_dir, "--no-seed", "--no-access-log", env=environment) as server:
        if server.wait_for("/v2/models/simple/ready", timeout=120) != 200:
            pytest.fail(f"the model 'simple' did not become ready:\n{server.log()[-4000:]}")
        yield server


SIMPLE_REQUEST = orjson.dumps(
    {
        "inputs": [
            {"name": name, "shape": [1, 16], "datatype": "INT32", "data": list(range(16))}
            for name in ("INPUT0", "INPUT1")
        ]
    }
)


def infer_simple(server: ServerProcess) -> None:
    """One inference of `simple` over HTTP; fails the test on anything but 200."""
    request = urllib.request.Request(
        server.base_url + "/v2/models/simple/infer",
        data=SIMPLE_REQUEST,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


@contextmanager
def steady_load(server: ServerProcess, infer: Callable[[], None] | None = None) -> Iterator[list[int]]:
    """Send requests (`simple`'s unless `infer` sends another) from a thread until the block ends; yields a one-item
    list: requests sent so far."""
    sent = [0]
    stop = threading.Event()
    failures: list[BaseException] = []
    infer_one = infer or (lambda: infer_simple(server))

    def send() -> None:
        while not stop.is_set():
            try:
                infer_one()
            except BaseException as exc:  # noqa: BLE001 - reported to the test below
                failures.append(exc)
                return
            sent[0] += 1

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    try:
        yield sent
    finally:
        stop.set()
        thread.join(timeout=15)
    assert not failures, failures


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three real replicas (deploy/cluster.py) on one PostgreSQL database of their own and a Redis of their own,
    serving Triton's `simple`, registered from the shell as an operator would."""
    workdir = tmp_path_factory.mktemp("cluster")
    env = {"INFERA_DISABLE_NVML": "1", "INFERA_INFERENCE_AUTH": "none", "INFERA_SECURE_COOKIES": "false"}
    try:
        started = LocalCluster(3, workdir=workdir, database=None, redis_url=None, env=env).start()
    except ClusterError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no local cluster here: {exc}")
    try:
        make_simple_onnx(workdir / "repository")
        started.manage("import_repository", str(workdir / "repository"))
        for index in range(len(started.replicas)):
            replica = replica_server(started, index)
            assert replica.wait_for("/v2/models/simple/ready", timeout=120) == 200, replica.log()[-3000:]
        yield started
    finally:
        started.stop()


def replica_server(cluster: LocalCluster, index: int) -> ServerProcess:
    """One replica of `cluster` as the tests' helpers know a server: its URL, log, process and admin."""
    replica = cluster.replicas[index]
    return ServerProcess(
        replica.url, replica.var_dir, replica.log_path, replica.process, admin_password=cluster.admin_password
    )
