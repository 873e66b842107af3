"""A python model's stub gets an environment built from an allow-list, a HOME of its own, and cannot read the
server's environment through /proc (issue 32, a low finding)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from engine.backends import Device
from engine.backends.python import PythonBackend
from tests.engine.model_factory import make_python_model, python_config

REPORTS_WHAT_IT_SEES = textwrap.dedent(
    """
    import json, os


    def attempt(path):
        try:
            with open(path, "rb") as f:
                return f.read(200).decode(errors="replace")
        except OSError as exc:
            return type(exc).__name__


    class TritonPythonModel:
        def initialize(self, args):
            server = int(open("server.pid").read())
            report = {
                "environment": dict(os.environ),
                "home_exists": os.path.isdir(os.environ.get("HOME", "/nonexistent")),
                "environ": attempt(f"/proc/{server}/environ"),
                "maps": attempt(f"/proc/{server}/maps"),
            }
            with open("report.json", "w") as f:
                json.dump(report, f)

        def execute(self, requests):
            return []
    """
)


def report(tmp_path: Path) -> tuple[dict, PythonBackend]:
    """Load the model in its stub (as the server does); what it saw, and the backend to unload."""
    config = python_config("sees", [("X", "TYPE_FP32", [4])], [("Y", "TYPE_FP32", [4])])
    model_dir = make_python_model(tmp_path, "sees", REPORTS_WHAT_IT_SEES, config)
    (model_dir / "1" / "server.pid").write_text(str(os.getpid()))
    config.parameters["EXECUTION_MODE"] = "process"
    backend = PythonBackend(config, model_dir / "1", Device())
    backend.load()
    return json.loads((model_dir / "1" / "report.json").read_text()), backend


def test_it_passes_no_token_nor_cache_folder_to_a_stub(tmp_path, monkeypatch):
    passed = {"OMP_NUM_THREADS": "2", "LC_ALL": "C.UTF-8", "CUDA_VISIBLE_DEVICES": "", "LANG": "C.UTF-8"}
    refused = {
        "HF_TOKEN": "hf_secret",
        "HF_HOME": "/root/.cache/huggingface",
        "HUGGING_FACE_HUB_TOKEN": "hf_secret",
        "TORCH_HOME": "/root/.cache/torch",
        "XDG_CONFIG_HOME": "/root/.config",
        "CUDA_ACCESS_TOKEN": "secret",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "INFERA_SECRET_KEY": "secret",
        "INFERA_ADMIN_PASSWORD": "secret",
        "DATABASE_URL": "postgres://user:pw@db/x",
        "PYTHONPATH": "/somewhere/else",
    }
    for key, value in {**passed, **refused}.items():
        monkeypatch.setenv(key, value)
    seen, backend = report(tmp_path)
    backend.unload()
    environment = seen["environment"]
    assert not set(refused) & set(environment), environment
    assert {key: environment.get(key) for key in passed} == passed


def test_a_stub_has_a_home_of_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "server-home"))
    seen, backend = report(tmp_path)
    home = seen["environment"]["HOME"]
    try:
        assert seen["home_exists"] and home != str(tmp_path / "server-home")
    finally:
        backend.unload()
    assert not Path(home).exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="a stub of a non-root server has the server's (no) capabilities")
def test_a_stub_cannot_read_the_servers_environment(tmp_path):
    seen, backend = report(tmp_path)
    backend.unload()
    assert seen["environ"] == "PermissionError" and seen["maps"] == "PermissionError", seen
