"""Servers shared by console tests of several modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deploy.processes import RedisServer
from tests.conftest import manage_command, serve_process
from tests.engine.decoupled_models import build_decoupled_repository

GENERATOR_READY_S = 90


@pytest.fixture(scope="session")
def generator_server(tmp_path_factory: pytest.TempPathFactory):
    """A console serving `text_echo` (a decoupled python model that declares its text tensors), `repeat` and the
    other decoupled test models, imported from the shell as an operator would."""
    var_dir = tmp_path_factory.mktemp("generators") / "var"
    repo = build_decoupled_repository(tmp_path_factory.mktemp("generators-repo"))
    env = {"INFERA_DISABLE_NVML": "1"}
    with serve_process(var_dir, "--no-seed", env=env) as server:
        manage_command(var_dir, env)("import_repository", str(repo))
        assert server.wait_for("/v2/models/text_echo/ready", timeout=GENERATOR_READY_S) == 200
        yield server


@pytest.fixture(scope="module")
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server of the module's own on a free port (deploy/processes.py), which a test may stop and start."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
