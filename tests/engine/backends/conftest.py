"""One real server over the python-backend API models, shared by the tests of this folder that need it."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def python_server(tmp_path_factory: pytest.TempPathFactory):
    """(`host:port`, log file) of a uvicorn server over tests.engine.backends.python_models' repository."""
    from tests.engine.backends.python_models import build_python_repository
    from tests.engine.frontend.server_process import running_server

    repo = build_python_repository(tmp_path_factory.mktemp("python-repository"))
    log_path: Path = tmp_path_factory.mktemp("python-logs") / "uvicorn.log"
    with running_server("uvicorn", repo, log_path) as url:
        yield url, log_path


@pytest.fixture
def python_url(python_server) -> str:
    return python_server[0]
