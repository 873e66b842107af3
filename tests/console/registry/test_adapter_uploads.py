"""A LoRA adapter uploaded through the REST API as a version of a model whose config names its base: a zipped PEFT
folder is detected as the `lora` backend's, trial-loaded from its files alone and stored as sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.console.registry.conftest import model_file, upload, zip_of
from tests.engine.llm.tiny_llama import build_tiny_llama

pytestmark = pytest.mark.django_db

BASE_CONFIG = 'parameters { key: "base_model" value: { string_value: "tiny" } }\n'


@pytest.fixture(scope="module")
def adapter_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """A rank-2 LoRA of the tiny Llama's q_proj, as peft saves it (file name to bytes)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    base = build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))
    torch.manual_seed(0)
    model = LlamaForCausalLM.from_pretrained(base, local_files_only=True)
    tuned = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], init_lora_weights=False))
    folder = tmp_path_factory.mktemp("adapter")
    tuned.save_pretrained(folder)
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


@pytest.fixture(autouse=True)
def registered(as_operator):
    assert as_operator.post("/api/models/", {"name": "tiny-lora"}, format="json").status_code == 201


def test_a_zipped_peft_folder_uploads_as_a_lora_version(as_operator, store: Path, adapter_files):
    members = {f"tiny-lora/1/{name}": data for name, data in adapter_files.items()}
    archive = zip_of({"tiny-lora/config.pbtxt": BASE_CONFIG.encode(), **members})
    answer = upload(as_operator, "tiny-lora", model_file(archive, "tiny-lora.zip"))
    assert answer.status_code == 201, answer.content
    config = answer.json()["config"]
    assert config["backend"] == "lora"
    assert config["parameters"]["base_model"]["string_value"] == "tiny"
    assert config["model_transaction_policy"]["decoupled"] is True
    assert {t["name"] for t in config["input"]} >= {"text_input", "messages"}
    assert sorted(p.name for p in (store / "tiny-lora" / "1").iterdir()) == sorted(adapter_files)


def test_an_adapter_with_a_layer_it_would_not_apply_is_refused(as_operator, adapter_files):
    broken = dict(adapter_files) | {
        "adapter_config.json": b'{"peft_type": "LORA", "r": 2, "lora_alpha": 4, "use_dora": true}'
    }
    archive = zip_of(
        {"tiny-lora/config.pbtxt": BASE_CONFIG.encode()}
        | {f"tiny-lora/1/{name}": data for name, data in broken.items()}
    )
    answer = upload(as_operator, "tiny-lora", model_file(archive, "tiny-lora.zip"))
    assert answer.status_code in (400, 422), answer.content
    assert "DoRA is not supported" in answer.json()["detail"]
