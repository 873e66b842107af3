"""Registry test cast: a store per test, one user per role with API clients, small real model files, and a console
serving a tiny random Llama."""

from __future__ import annotations

import io
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from engine.serving.server import InferenceServer
from tests.conftest import manage_command, serve_process
from tests.console.accounts import conftest as accounts_cast
from tests.engine.model_factory import make_mlp_onnx, make_simple_onnx, simple_config, to_pbtxt

# the cast of users, one per role, is the accounts tests' own
admin = accounts_cast.admin
operator = accounts_cast.operator
viewer = accounts_cast.viewer
clean_caches = accounts_cast.clean_caches
wsgi_keeps_test_connection = accounts_cast.wsgi_keeps_test_connection


@pytest.fixture(autouse=True)
def store(settings, tmp_path: Path) -> Path:
    """Every test gets an empty model store."""
    path = tmp_path / "store"
    path.mkdir()
    settings.INFERA = settings.INFERA.replace(model_store=path)
    return path


@pytest.fixture
async def engine(store):
    """A started in-process engine over the store, with nothing loaded (the reconciler loads)."""
    server = InferenceServer(store)
    await server.start(load_models=False)
    yield server
    from tests.console.registry.engine_helpers import stop_reconciler

    await stop_reconciler(server)
    await server.stop()


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def as_operator(operator) -> APIClient:
    return client_for(operator)


@pytest.fixture
def as_admin(admin) -> APIClient:
    return client_for(admin)


@pytest.fixture
def as_viewer(viewer) -> APIClient:
    return client_for(viewer)


# ---- model files, built once per session


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("factory")


@pytest.fixture(scope="session")
def simple_onnx(models_dir: Path) -> bytes:
    """Triton's `simple` (INT32 add/sub on [-1, 16]) as ONNX bytes."""
    return (make_simple_onnx(models_dir, "simple") / "1" / "model.onnx").read_bytes()


@pytest.fixture(scope="session")
def mlp_onnx(models_dir: Path) -> bytes:
    """A small FP32 MLP (INPUT0 [4] -> OUTPUT0 [3]) as ONNX bytes."""
    return (make_mlp_onnx(models_dir, "mlp", sizes=(4, 8, 3)) / "1" / "model.onnx").read_bytes()


SIMPLE_PBTXT = to_pbtxt(simple_config("simple")) + "dynamic_batching { }\n"


def model_file(content: bytes, name: str = "model.onnx") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content, content_type="application/octet-stream")


def zip_of(members: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    """A zip with these files, and `links` (name -> target) stored as symbolic links."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for name, data in members.items():
            bundle.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o120777 << 16) | 0
            bundle.writestr(info, target)
    return buffer.getvalue()


def tar_gz_of(members: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as bundle:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            bundle.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            bundle.addfile(info)
    return buffer.getvalue()


def upload(client: APIClient, name: str, file: SimpleUploadedFile, **fields):
    return client.post(f"/api/models/{name}/versions/", {"file": file, **fields}, format="multipart")


def ensemble_pbtxt(name: str = "pair", model: str = "simple", version: int = -1) -> str:
    """An ensemble of one step calling `model` (shaped like Triton's `simple`: INPUT0 + INPUT1 -> OUTPUT0)."""
    return f"""\
name: "{name}"
platform: "ensemble"
max_batch_size: 4
input [ {{ name: "A" data_type: TYPE_INT32 dims: [ 16 ] }}, {{ name: "B" data_type: TYPE_INT32 dims: [ 16 ] }} ]
output [ {{ name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] }} ]
ensemble_scheduling {{
  step [
    {{
      model_name: "{model}"
      model_version: {version}
      input_map {{ key: "INPUT0" value: "A" }}
      input_map {{ key: "INPUT1" value: "B" }}
      output_map {{ key: "OUTPUT0" value: "SUM" }}
    }}
  ]
}}
"""


def upload_config(client: APIClient, name: str, config: str, **fields):
    """An upload with a config and no file (an ensemble's version)."""
    return client.post(f"/api/models/{name}/versions/", {"config": config, **fields}, format="multipart")


LLM_READY_S = 120


@pytest.fixture(scope="module")
def llm_server(tmp_path_factory: pytest.TempPathFactory):
    """A console serving "tiny", a random 2-layer Llama on the llm backend (imported from the shell), for the
    browser tests of a language model's page."""
    from tests.engine.llm.test_llm_backend import CONFIG  # torch and transformers: only where a test asks
    from tests.engine.llm.tiny_llama import build_tiny_llama

    repo = tmp_path_factory.mktemp("llm-repo")
    (repo / "tiny").mkdir()
    (repo / "tiny" / "config.pbtxt").write_text(CONFIG)
    shutil.copytree(build_tiny_llama(tmp_path_factory.mktemp("tiny_llama")), repo / "tiny" / "1")
    var_dir = tmp_path_factory.mktemp("llm-console") / "var"
    env = {"INFERA_DISABLE_NVML": "1"}
    with serve_process(var_dir, "--no-seed", env=env) as server:
        manage_command(var_dir, env)("import_repository", str(repo))
        assert server.wait_for("/v2/models/tiny/ready", timeout=LLM_READY_S) == 200
        yield server
