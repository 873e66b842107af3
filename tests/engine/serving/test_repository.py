"""The model repository on disk: scans, configs, version policies, backend inference and the effective config."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from engine.backends import Backend, register_backend
from engine.config.model_config import ModelConfig, TensorConfig, VersionPolicy
from engine.errors import InvalidArgument, ModelNotFound
from engine.serving.repository import ModelRepository, complete_config, infer_backend, select_versions
from tests.engine.model_factory import make_simple_onnx


@register_backend
class RecordingBackend(Backend):
    """A backend whose auto-complete adds an output, so a test can see that it ran (it runs nothing)."""

    name: ClassVar[str] = "infera_test_recording"

    def load(self) -> None:
        raise NotImplementedError

    def execute(self, batch: object) -> object:
        raise NotImplementedError

    @classmethod
    def autocomplete(cls, config: ModelConfig, version_path: Path) -> ModelConfig:
        if not config.output:
            config.output = [TensorConfig("FROM_" + version_path.name, "TYPE_FP32", [1])]
        return config


def make_folder(root: Path, relative: str, files: tuple[str, ...] = ()) -> Path:
    folder = root / relative
    folder.mkdir(parents=True, exist_ok=True)
    for name in files:
        (folder / name).write_text("")
    return folder


def test_it_lists_folders_with_a_config_or_a_version(tmp_path: Path) -> None:
    make_folder(tmp_path, "with_pbtxt").joinpath("config.pbtxt").write_text('name: "with_pbtxt"')
    make_folder(tmp_path, "with_json").joinpath("config.json").write_text('{"name": "with_json"}')
    make_folder(tmp_path, "only_version/3")
    make_folder(tmp_path, "not_a_version/latest")
    make_folder(tmp_path, "zero_version/0")
    make_folder(tmp_path, "empty")
    make_folder(tmp_path, ".hidden/1")
    (tmp_path / "stray_file").write_text("")
    assert ModelRepository(tmp_path).model_names() == ["only_version", "with_json", "with_pbtxt"]


def test_it_rejects_a_missing_root(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="is not a folder"):
        ModelRepository(tmp_path / "nowhere").model_names()


def test_it_keeps_only_numeric_version_folders(tmp_path: Path) -> None:
    model = make_folder(tmp_path, "m")
    for name in ("1", "2", "10", "0", "01", "v3", "3.5", "-1", "config"):
        make_folder(model, name)
    (model / "4").write_text("a file, not a folder")
    versions = ModelRepository(tmp_path).version_paths("m")
    assert versions == {1: model / "1", 2: model / "2", 10: model / "10"}
    assert list(versions) == [1, 2, 10]


def test_it_refuses_unknown_and_unsafe_model_names(tmp_path: Path) -> None:
    repository = ModelRepository(make_folder(tmp_path, "repo"))
    make_folder(tmp_path, "outside/1")
    for name in ("missing", "../outside", "..", "a/b", ""):
        with pytest.raises(ModelNotFound):
            repository.model_dir(name)


def test_it_reads_pbtxt_and_json_configs(tmp_path: Path) -> None:
    make_folder(tmp_path, "a").joinpath("config.pbtxt").write_text('name: "a"\nmax_batch_size: 4\n')
    make_folder(tmp_path, "b").joinpath("config.json").write_text('{"maxBatchSize": "2"}')
    make_folder(tmp_path, "c/1")
    repository = ModelRepository(tmp_path)
    assert repository.read_config("a") == ModelConfig(name="a", max_batch_size=4)
    assert repository.read_config("b") == ModelConfig(name="", max_batch_size=2)
    assert repository.read_config("c") is None


def test_it_names_the_model_file_in_config_errors(tmp_path: Path) -> None:
    make_folder(tmp_path, "bad").joinpath("config.pbtxt").write_text('name: "bad"\nmax_batchsize: 4\n')
    with pytest.raises(InvalidArgument, match=r"^bad/config.pbtxt: line 2: unknown field 'max_batchsize'"):
        ModelRepository(tmp_path).read_config("bad")


def test_it_refuses_two_configs(tmp_path: Path) -> None:
    make_folder(tmp_path, "both", ("config.pbtxt", "config.json"))
    with pytest.raises(InvalidArgument, match="model 'both' has both config.pbtxt and config.json"):
        ModelRepository(tmp_path).read_config("both")


@pytest.mark.parametrize(
    ("policy", "selected"),
    [
        (VersionPolicy(), [7]),
        (VersionPolicy(kind="latest", num_versions=2), [3, 7]),
        (VersionPolicy(kind="latest", num_versions=10), [1, 3, 7]),
        (VersionPolicy(kind="all"), [1, 3, 7]),
        (VersionPolicy(kind="specific", versions=[7, 1]), [1, 7]),
    ],
)
def test_it_selects_versions_by_policy(policy: VersionPolicy, selected: list[int]) -> None:
    assert select_versions(policy, [7, 1, 3]) == selected


def test_it_names_missing_specific_versions() -> None:
    policy = VersionPolicy(kind="specific", versions=[1, 4, 5])
    with pytest.raises(InvalidArgument, match=r"model 'm': version_policy: specific versions \[4, 5\] have no"):
        select_versions(policy, [1, 2], model_name="m")
    assert select_versions(VersionPolicy(), []) == []


@pytest.mark.parametrize(
    ("file", "backend"),
    [("model.onnx", "onnxruntime"), ("model.pt", "pytorch"), ("model.pt2", "pytorch"), ("model.py", "python")],
)
def test_it_infers_the_backend_from_the_model_file(tmp_path: Path, file: str, backend: str) -> None:
    version = make_folder(tmp_path, "m/1", (file, "README.md"))
    assert infer_backend(version, ModelConfig(name="m")) == backend


@pytest.mark.parametrize(
    ("files", "backend"),
    [
        (("config.json", "model.safetensors", "tokenizer.json"), "llm"),
        (("config.json", "model.safetensors", "modules.json"), "encoder"),  # a sentence-transformers folder
        (("adapter_config.json", "adapter_model.safetensors"), "lora"),  # a PEFT adapter
    ],
)
def test_it_infers_the_backend_of_a_hugging_face_folder(tmp_path: Path, files: tuple[str, ...], backend: str) -> None:
    version = make_folder(tmp_path, "m/1", files)
    assert infer_backend(version, ModelConfig(name="m")) == backend


def test_it_prefers_the_backend_the_config_names(tmp_path: Path) -> None:
    version = make_folder(tmp_path, "m/1", ("model.onnx",))
    assert infer_backend(version, ModelConfig(name="m", backend="python")) == "python"
    assert infer_backend(version, ModelConfig(name="m", platform="pytorch_libtorch")) == "pytorch"


def test_it_honours_default_model_filename(tmp_path: Path) -> None:
    version = make_folder(tmp_path, "m/1", ("model.onnx", "custom.py"))
    assert infer_backend(version, ModelConfig(name="m", default_model_filename="custom.py")) == "python"
    with pytest.raises(InvalidArgument, match="cannot tell the backend of default_model_filename 'weights.bin'"):
        infer_backend(version, ModelConfig(name="m", default_model_filename="weights.bin"))


def test_it_explains_when_the_backend_cannot_be_told(tmp_path: Path) -> None:
    empty = make_folder(tmp_path, "m/1")
    with pytest.raises(InvalidArgument, match="model 'm': version folder '1' holds none of model.onnx"):
        infer_backend(empty, ModelConfig(name="m"))
    both = make_folder(tmp_path, "m/2", ("model.onnx", "model.py"))
    with pytest.raises(InvalidArgument, match="holds model.onnx and model.py; set 'backend'"):
        infer_backend(both, ModelConfig(name="m"))
    with pytest.raises(InvalidArgument, match="no version folder to tell the backend from"):
        infer_backend(None, ModelConfig(name="m"))


def test_it_completes_a_config_through_the_backend(tmp_path: Path) -> None:
    model_dir = make_folder(tmp_path, "rec")
    make_folder(model_dir, "1")
    make_folder(model_dir, "2")
    given = ModelConfig(name="", backend=RecordingBackend.name)
    config = complete_config("rec", model_dir, None, given)
    assert config.name == "rec"
    assert config.output == [TensorConfig("FROM_2", "TYPE_FP32", [1])]  # the highest version was inspected
    assert given.name == "" and given.output == []  # the caller's config is left as it was


def test_it_applies_an_override_before_completing(tmp_path: Path) -> None:
    model_dir = make_folder(tmp_path, "rec")
    version = make_folder(model_dir, "1")
    given = ModelConfig(name="rec", backend=RecordingBackend.name, max_batch_size=4)
    config = complete_config("rec", model_dir, version, given, {"max_batch_size": "16"})
    assert config.max_batch_size == 16
    with pytest.raises(InvalidArgument, match="model 'rec': max_batch_size must be 0 or more"):
        complete_config("rec", model_dir, version, given, {"max_batch_size": -1})


def test_it_rejects_a_config_named_after_another_model(tmp_path: Path) -> None:
    model_dir = make_folder(tmp_path, "folder_name/1")
    config = ModelConfig(name="other_name", backend=RecordingBackend.name)
    with pytest.raises(InvalidArgument, match="model 'folder_name': the config names the model 'other_name'"):
        complete_config("folder_name", model_dir.parent, None, config)


def test_it_fills_the_torch_export_platform_from_a_pt2_file(tmp_path: Path) -> None:
    version = make_folder(tmp_path, "m/1", ("model.pt2",))
    given = ModelConfig(name="m", backend="pytorch", max_batch_size=0, input=[], output=[])
    config = complete_config("m", version.parent, version, given)
    assert (config.backend, config.platform, config.model_filename) == ("pytorch", "torch_export", "model.pt2")


def test_it_completes_an_onnx_model_without_a_config(tmp_path: Path) -> None:
    model_dir = make_simple_onnx(tmp_path, "simple", write_config=False)
    repository = ModelRepository(tmp_path)
    assert repository.read_config("simple") is None
    config = complete_config("simple", model_dir, repository.version_paths("simple")[1], None)
    assert (config.name, config.backend, config.platform) == ("simple", "onnxruntime", "onnxruntime_onnx")
    assert config.max_batch_size > 0
    assert [t.name for t in config.input] == ["INPUT0", "INPUT1"]
    assert config.input[0] == TensorConfig("INPUT0", "TYPE_INT32", [16])


def test_it_validates_the_completed_config(tmp_path: Path) -> None:
    model_dir = make_simple_onnx(tmp_path, "simple", write_config=False)
    with pytest.raises(InvalidArgument, match="model 'simple': dynamic_batching: preferred_batch_size 64"):
        complete_config(
            "simple", model_dir, model_dir / "1", None, {"dynamic_batching": {"preferred_batch_size": [64]}}
        )
