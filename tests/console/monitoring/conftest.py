"""Fixtures of the console monitoring tests: users by role, and a sampler over stand-in served versions."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import orjson
import pytest
from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model

from console.accounts.roles import set_role
from console.demo_sequences import write_sequence_models
from engine.monitoring.sampler import MetricsSampler
from tests.conftest import ServerProcess, serve_process
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


class SampledServer:
    """A sampler over stand-in versions with a hand clock; `tick()` samples one second later."""

    def __init__(self, *served: Served) -> None:
        self.clock = FakeClock()
        self.versions = ServedVersions(*served)
        self.sampler = MetricsSampler(self.versions, clock=self.clock, wall_clock=lambda: self.clock.now)

    @property
    def runtime(self) -> SimpleNamespace:
        """What a consumer finds under the scope's runtime key: the sampler it reads its backlog from."""
        return SimpleNamespace(sampler=self.sampler)

    def tick(self) -> dict:
        self.clock.advance(1.0)
        return self.sampler.sample(devices=FIXED_DEVICES)


@pytest.fixture
def sampled(in_memory_layer) -> Iterator[SampledServer]:
    yield SampledServer(Served("alpha", 1), Served("beta", 1), Served("beta", 2))


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
def steady_load(server: ServerProcess) -> Iterator[list[int]]:
    """Send `simple` requests from a thread until the block ends; yields a one-item list: requests sent so far."""
    sent = [0]
    stop = threading.Event()
    failures: list[BaseException] = []

    def send() -> None:
        while not stop.is_set():
            try:
                infer_simple(server)
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
