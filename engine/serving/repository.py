"""A Triton-layout model repository: `<root>/<model>/config.pbtxt|config.json` and `<root>/<model>/<N>/<file>`."""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from typing import Any

from engine.backends import get_backend
from engine.config.model_config import ModelConfig, VersionPolicy, cpu_instance_count
from engine.config.text_format import CONFIG_FILES, merge_config, read_config_file
from engine.config.validate import check_model_filename, validate_config
from engine.errors import InvalidArgument, ModelNotFound

__all__ = [
    "ModelRepository",
    "select_versions",
    "infer_backend",
    "resolve_config",
    "complete_config",
    "CONFIG_FILES",
]

# as Triton: folders named 0, 01 or anything not a number are not versions
VERSION_FOLDER = re.compile(r"^[1-9][0-9]*$")
# the model file found in a version folder -> (backend, platform), for configs that name neither
MODEL_FILE_BACKENDS: dict[str, tuple[str, str]] = {
    "model.onnx": ("onnxruntime", "onnxruntime_onnx"),
    "model.pt": ("pytorch", "pytorch_libtorch"),
    "model.pt2": ("pytorch", "torch_export"),
    "model.py": ("python", ""),
    "model.gguf": ("llm", ""),
}
LLM_BACKEND = ("llm", "")  # a Hugging Face folder's backend (config.json and *.safetensors, no model file)
ENCODER_BACKEND = ("encoder", "")  # a sentence-transformers folder's (a Hugging Face folder with modules.json)
LORA_BACKEND = ("lora", "")  # a PEFT adapter's (adapter_config.json and adapter_model.safetensors)
_SUFFIX_BACKENDS = {Path(name).suffix: found for name, found in MODEL_FILE_BACKENDS.items()}


class ModelRepository:
    """The model folders under one root; reads configs and version folders, loads nothing."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def model_names(self) -> list[str]:
        """Folders that hold a config or at least one numbered version folder, sorted by name."""
        if not self.root.is_dir():
            raise InvalidArgument(f"model repository '{self.root}' is not a folder")
        return sorted(
            entry.name
            for entry in self.root.iterdir()
            if entry.is_dir() and not entry.name.startswith(".") and _looks_like_model(entry)
        )

    def model_dir(self, name: str) -> Path:
        """The folder of model `name`; ModelNotFound when there is none."""
        if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith("."):
            raise ModelNotFound(f"'{name}' is not a model name")
        path = self.root / name
        if not path.is_dir():
            raise ModelNotFound(f"model '{name}' is not in the repository")
        return path

    def version_paths(self, name: str) -> dict[int, Path]:
        """Numbered version folders of a model by version, ascending; other entries are ignored."""
        return numbered_folders(self.model_dir(name))

    def read_config(self, name: str) -> ModelConfig | None:
        """The model's config.pbtxt or config.json as written (not completed); None when it has neither."""
        return read_config_file(self.model_dir(name))


def select_versions(policy: VersionPolicy, available: list[int], model_name: str = "") -> list[int]:
    """The versions a policy serves out of those on disk, ascending; a missing specific version is an error."""
    prefix = f"model '{model_name}': " if model_name else ""
    versions = sorted(set(available))
    if policy.kind == "all":
        return versions
    if policy.kind == "latest":
        if policy.num_versions < 1:
            raise InvalidArgument(f"{prefix}version_policy: latest num_versions must be 1 or more")
        return versions[-policy.num_versions :]
    if policy.kind == "specific":
        missing = sorted(set(policy.versions) - set(versions))
        if missing:
            raise InvalidArgument(
                f"{prefix}version_policy: specific versions {missing} have no version folder "
                f"(available: {versions or 'none'})"
            )
        return sorted(set(policy.versions))
    raise InvalidArgument(f"{prefix}version_policy: unknown kind '{policy.kind}' (expected latest, all or specific)")


def infer_backend(version_path: Path | None, config: ModelConfig) -> str:
    """The backend that runs a version: the config's, or else the one its model file implies."""
    return config.backend_name or _backend_from_files(version_path, config)[0]


def resolve_config(
    name: str,
    model_dir: Path,
    version_path: Path | None,
    config: ModelConfig | None,
    override: dict[str, Any] | None = None,
) -> tuple[ModelConfig, Path | None]:
    """The config with the override merged and name, backend and platform filled: no model file is read.

    Enough to know which backend will load a version (and so whether it runs code) before anything parses or runs
    the version's files. Returns the config and the version folder the backend will inspect (`version_path`, or
    the highest numbered one in `model_dir` when None).
    """
    config = copy.deepcopy(config) if config is not None else ModelConfig(name="")
    if override:
        config = merge_config(config, override, source=f"model '{name}': config override")
    if not config.name:
        config.name = name
    elif config.name != name:
        raise InvalidArgument(f"model '{name}': the config names the model '{config.name}', its folder is '{name}'")
    check_model_filename(config)
    if version_path is None:
        numbered = numbered_folders(Path(model_dir))
        version_path = numbered[max(numbered)] if numbered else None
    if not config.backend_name:
        config.backend, platform = _backend_from_files(version_path, config)
        config.platform = config.platform or platform
    config.backend = config.backend or config.backend_name  # Triton reports the backend of a platform too
    if config.backend == "pytorch" and not config.platform and not config.default_model_filename:
        config.platform = _pytorch_platform(version_path)
    return config, version_path


def complete_config(
    name: str,
    model_dir: Path,
    version_path: Path | None,
    config: ModelConfig | None,
    override: dict[str, Any] | None = None,
) -> ModelConfig:
    """The effective config of a model: resolved (see resolve_config), completed by its backend, validated.

    `version_path` is the version folder the backend inspects; None means the highest numbered one in
    `model_dir`, if any. The given config is not modified.
    """
    config, version_path = resolve_config(name, model_dir, version_path, config, override)
    if version_path is not None:
        config = get_backend(config.backend_name).autocomplete(config, version_path)
    validate_config(config)
    return with_cpu_instance_counts(config)


def with_cpu_instance_counts(config: ModelConfig) -> ModelConfig:
    """The config with Triton's default `count` written into its KIND_CPU groups that name none (as Triton shows
    it); a KIND_AUTO group's kind, and so its count, is known only where it loads."""
    if not any(g.kind == "KIND_CPU" and not g.count_given for g in config.instance_group):
        return config
    groups = [
        dataclasses.replace(g, count=cpu_instance_count(g, config.backend_name), count_given=True)
        if g.kind == "KIND_CPU" and not g.count_given
        else g
        for g in config.instance_group
    ]
    return dataclasses.replace(config, instance_group=groups)


def _looks_like_model(folder: Path) -> bool:
    return any((folder / file).is_file() for file in CONFIG_FILES) or bool(numbered_folders(folder))


def numbered_folders(folder: Path) -> dict[int, Path]:
    if not folder.is_dir():
        return {}
    found = {int(e.name): e for e in folder.iterdir() if e.is_dir() and VERSION_FOLDER.match(e.name)}
    return dict(sorted(found.items()))


def _backend_from_files(version_path: Path | None, config: ModelConfig) -> tuple[str, str]:
    """(backend, platform) implied by default_model_filename or by the model file in the version folder."""
    subject = f"model '{config.name}'" if config.name else "the model"
    if config.default_model_filename:
        found = _SUFFIX_BACKENDS.get(Path(config.default_model_filename).suffix)
        if found is None:
            raise InvalidArgument(
                f"{subject}: cannot tell the backend of default_model_filename "
                f"'{config.default_model_filename}'; set 'backend' in the config"
            )
        return found
    if version_path is None:
        raise InvalidArgument(f"{subject}: no version folder to tell the backend from; set 'backend' in the config")
    present = [file for file in MODEL_FILE_BACKENDS if (Path(version_path) / file).exists()]
    if not present and holds_hf_folder(Path(version_path)):
        folder = Path(version_path)
        if holds_adapter(folder):
            return LORA_BACKEND
        return ENCODER_BACKEND if (folder / "modules.json").is_file() else LLM_BACKEND
    if not present:
        raise InvalidArgument(
            f"{subject}: version folder '{Path(version_path).name}' holds none of "
            f"{', '.join(MODEL_FILE_BACKENDS)}; set 'backend' or 'platform' in the config"
        )
    if len(present) > 1:
        raise InvalidArgument(
            f"{subject}: version folder '{Path(version_path).name}' holds {' and '.join(present)}; "
            "set 'backend' (and 'default_model_filename') in the config to say which one serves"
        )
    return MODEL_FILE_BACKENDS[present[0]]


def holds_hf_folder(folder: Path) -> bool:
    """The folder is a Hugging Face model's (its config.json beside *.safetensors weights: the llm backend's, or the
    encoder backend's with sentence-transformers' modules.json) or a PEFT adapter's (the lora backend's)."""
    return ((folder / "config.json").is_file() and any(folder.glob("*.safetensors"))) or holds_adapter(folder)


def holds_adapter(folder: Path) -> bool:
    """The folder is a PEFT LoRA adapter's: adapter_config.json beside adapter_model.safetensors."""
    return (folder / "adapter_config.json").is_file() and (folder / "adapter_model.safetensors").is_file()


def _pytorch_platform(version_path: Path | None) -> str:
    """torch_export when a pytorch version folder holds only model.pt2, so the backend opens that file."""
    if version_path is None:
        return ""
    folder = Path(version_path)
    return "torch_export" if (folder / "model.pt2").exists() and not (folder / "model.pt").exists() else ""
