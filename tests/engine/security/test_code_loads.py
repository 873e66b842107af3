"""Loads that would run code in the server: the engine decides, on normalised paths, for every caller.

Each test reproduces an attack that got through before: a trailing slash on `file:1/model.py/`, a crafted `.pt2`,
a model named `..`, an absolute default_model_filename.
"""

from __future__ import annotations

import base64
import tempfile
from pathlib import Path

import orjson
import pytest

from engine.errors import CodeRefused, LoadError
from engine.frontend import V2App
from engine.serving.admission import SYSTEM, Principal
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings
from tests.engine.frontend.asgi_client import call
from tests.engine.model_factory import make_hostile_pt2, make_simple_onnx

OPERATOR = Principal("otto", may_change_models=True, may_load_code=False, role="operator", user_id=2)
ADMIN = Principal("ada", may_change_models=True, may_load_code=True, role="admin", user_id=1)
# a model.py that proves it ran: it makes the folder named in MARKER when imported
CODE = (
    "import os\nos.mkdir({marker!r})\n\nclass TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
)
PYTHON_CONFIG = {"backend": "python", "max_batch_size": 0, "input": [], "output": []}


def as_app(server: InferenceServer, principal: Principal) -> V2App:
    async def authenticate(scope) -> Principal:
        return principal

    return V2App(server, authenticate=authenticate)


def load_body(files: dict[str, bytes], config: dict | None = None) -> bytes:
    parameters: dict = {f"file:{path}": base64.b64encode(content).decode() for path, content in files.items()}
    if config is not None:
        parameters["config"] = orjson.dumps(config).decode()
    return orjson.dumps({"parameters": parameters})


def sent_file_folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("infera-files-*")}


@pytest.fixture
async def server(tmp_path):
    server = InferenceServer(tmp_path / "repository", gpu_count=0)
    (tmp_path / "repository").mkdir()
    await server.start()
    yield server
    await server.stop()


@pytest.mark.parametrize("path", ["1/model.py/", "1/model.py/.", "1//model.py//", "/1/model.py"])
async def test_a_trailing_slash_does_not_hide_code_from_an_operator(server, tmp_path, path):
    marker = tmp_path / "ran"
    body = load_body({path: CODE.format(marker=str(marker)).encode()}, PYTHON_CONFIG)
    before = sent_file_folders()
    answer = await call(as_app(server, OPERATOR), "POST", "/v2/repository/models/x/load", body)
    assert answer.status == 403, answer.body
    assert "only admins may upload python-backend models" in answer.json()["error"]
    assert not marker.exists() and not server.model_ready("x")
    assert sent_file_folders() == before  # nothing left behind


async def test_code_is_refused_to_everyone_when_the_server_disallows_it(tmp_path):
    server = InferenceServer(gpu_count=0, settings=EngineSettings(allow_code=False))
    await server.start(load_models=False)
    try:
        marker = tmp_path / "ran"
        body = load_body({"1/model.py/": CODE.format(marker=str(marker)).encode()}, PYTHON_CONFIG)
        answer = await call(as_app(server, ADMIN), "POST", "/v2/repository/models/x/load", body)
        assert answer.status == 403 and "INFERA_ALLOW_PYTHON_MODELS=false" in answer.json()["error"]
        assert not marker.exists()
    finally:
        await server.stop()


async def test_a_crafted_pt2_runs_code_when_torch_loads_it(tmp_path):
    """The attack itself, shown on torch directly: loading the archive makes the marker folder."""
    import torch

    marker = tmp_path / "ran"
    model = make_hostile_pt2(tmp_path / "repo", marker) / "1" / "model.pt2"
    try:
        torch.export.load(str(model))
    except Exception:  # noqa: BLE001 - whether torch then fails does not matter: the payload already ran
        pass
    assert marker.is_dir()


async def test_a_pt2_is_code_to_the_engine(server, tmp_path):
    marker = tmp_path / "ran"
    archive = (make_hostile_pt2(tmp_path / "repo", marker) / "1" / "model.pt2").read_bytes()
    with pytest.raises(CodeRefused, match="torch.export archive"):
        await server.load_model("hostile", files={"1/model.pt2": archive}, caller=OPERATOR)
    assert not marker.exists()


async def test_a_pt2_from_a_trusted_caller_is_still_trial_loaded_where_its_code_cannot_reach_the_server(
    server, tmp_path
):
    marker = tmp_path / "ran"
    archive = (make_hostile_pt2(tmp_path / "repo", marker) / "1" / "model.pt2").read_bytes()
    before = sent_file_folders()
    with pytest.raises(LoadError, match="Permission denied"):
        await server.load_model("hostile", files={"1/model.pt2": archive}, caller=ADMIN)
    assert not marker.exists() and not server.model_ready("hostile")
    assert sent_file_folders() == before


@pytest.mark.parametrize("name", ["..", "%2E%2E", ".hidden", "con"])
async def test_a_model_name_is_checked_before_any_file_is_written(server, name):
    before = sent_file_folders()
    body = load_body({"1/model.onnx": b"onnx"})
    answer = await call(as_app(server, ADMIN), "POST", f"/v2/repository/models/{name}/load", body)
    assert answer.status == 400 and "is invalid" in answer.json()["error"]
    assert sent_file_folders() == before


async def test_an_absolute_default_model_filename_is_never_opened(server, tmp_path):
    make_simple_onnx(tmp_path / "repository", name="simple")
    with pytest.raises(LoadError, match="default_model_filename '/etc/passwd' must be a file name"):
        await server.load_model("simple", config={"default_model_filename": "/etc/passwd"}, caller=SYSTEM)


async def test_a_failed_load_of_sent_files_leaves_no_folder_and_unload_forgets_it(server, tmp_path):
    onnx = (make_simple_onnx(tmp_path / "made", name="m") / "1" / "model.onnx").read_bytes()
    before = sent_file_folders()
    with pytest.raises(LoadError, match="not a readable ONNX model"):
        await server.load_model("adhoc", files={"1/model.onnx": b"not onnx"}, caller=ADMIN)
    assert sent_file_folders() == before
    assert [row for row in server.repository_index() if row["name"] == "adhoc"]  # the failure is reported...
    await server.load_model("adhoc", files={"1/model.onnx": onnx}, caller=ADMIN)
    assert server.model_ready("adhoc") and len(sent_file_folders() - before) == 1
    await server.unload_model("adhoc", caller=ADMIN)
    assert sent_file_folders() == before  # ...and an unload forgets the model and its folder
    assert not [row for row in server.repository_index() if row["name"] == "adhoc"]


async def test_a_file_name_too_long_for_the_disk_is_a_400_naming_it(server):
    before = sent_file_folders()
    answer = await call(
        as_app(server, ADMIN), "POST", "/v2/repository/models/m/load", load_body({"1/" + "a" * 300: b"x"})
    )
    assert answer.status == 400 and "longer than 255 bytes" in answer.json()["error"]
    assert sent_file_folders() == before


async def test_callers_who_may_not_change_models_are_refused_before_the_body_is_read(server):
    viewer = Principal("val", role="viewer", user_id=3)
    answer = await call(as_app(server, viewer), "POST", "/v2/repository/models/m/unload", b"{}")
    assert answer.status == 403 and "role 'viewer' may not load or unload models" in answer.json()["error"]
    anonymous = await call(V2App(server), "POST", "/v2/repository/models/m/unload", b"{}")
    assert anonymous.status == 403 and "needs an API token" in anonymous.json()["error"]
