"""The engine's facade: a model repository, the versions it serves, and inference on them."""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

import orjson

from engine import __version__
from engine.config import ModelConfig
from engine.config_format import config_to_dict, parse_config_json
from engine.devices import gpu_count
from engine.errors import InferaError, InvalidArgument, LoadError, ModelNotFound
from engine.lifecycle import ModelManager, ModelState, ServedVersion
from engine.repository import ModelRepository, complete_config, select_versions
from engine.types import InferenceRequest, InferenceResponse

log = logging.getLogger("infera.engine")

EXTENSIONS = [
    "classification",
    "model_configuration",
    "model_repository",
    "schedule_policy",
    "model_repository(unload_dependents)",
    "binary_tensor_data",
    "parameters",
    "statistics",
]


class InferenceServer:
    """What a front end talks to: load and unload models, look them up, run inference, read stats."""

    def __init__(self, repository: Path | str | None = None, *, gpu_count: int | None = None) -> None:
        self.repository = ModelRepository(Path(repository)) if repository else None
        self.manager = ModelManager(gpus=_gpus(gpu_count))
        self.name = "infera"
        self.version = __version__
        self._started = False
        self._temp_dirs: dict[str, Path] = {}

    async def start(self, load_models: bool = True) -> None:
        """Start serving; with `load_models`, load every model in the repository (failures are logged).

        Ready (Triton's /v2/health/ready) only once that first load is over, so a load balancer sends no
        traffic to a replica that would still answer "unknown model".
        """
        if load_models and self.repository is not None:
            for name in self.repository.model_names():
                try:
                    await self.load_model(name)
                except InferaError as exc:
                    log.error("%s", exc.message)
        self._started = True

    async def stop(self) -> None:
        self._started = False
        await self.manager.stop()
        for path in self._temp_dirs.values():
            shutil.rmtree(path, ignore_errors=True)
        self._temp_dirs.clear()

    def is_live(self) -> bool:
        return True

    def is_ready(self) -> bool:
        return self._started

    async def load_model(
        self,
        name: str,
        *,
        config: dict | str | None = None,
        files: dict[str, bytes] | None = None,
        versions: dict[int, Path] | None = None,
        active_version: int | None = None,
    ) -> None:
        """Load (or reload) a model: from the repository, from explicit version folders, or from sent files."""
        override = _config_override(name, config)
        try:
            if files:
                model_dir = self._write_files(name, files)
                raw = parse_config_json(override) if override else None
                override = None
                version_paths = _numeric_dirs(model_dir)
            elif versions:
                version_paths = {int(v): Path(p) for v, p in versions.items()}
                model_dir = next(iter(version_paths.values())).parent
                raw = ModelRepository(model_dir.parent).read_config(model_dir.name)
            else:
                if self.repository is None or name not in self.repository.model_names():
                    raise LoadError(f"no model folder named '{name}' in the model repository")
                model_dir = self.repository.model_dir(name)
                raw = self.repository.read_config(name)
                version_paths = self.repository.version_paths(name)
            if not version_paths:
                raise LoadError(f"model '{name}' has no numeric version folder")
            latest = version_paths[max(version_paths)]
            effective = complete_config(name, model_dir, latest, raw, override)
            if not versions:
                selected = select_versions(effective.version_policy, sorted(version_paths))
                version_paths = {v: version_paths[v] for v in selected}
            await self.manager.load(effective, version_paths, active_version)
        except InferaError as exc:
            if exc.message.startswith("failed to load"):
                raise
            self.manager.record_error(name, exc.message)
            raise LoadError(f"failed to load '{name}': {exc.message}") from exc

    def _write_files(self, name: str, files: dict[str, bytes]) -> Path:
        """Lay Triton's `file:<version>/<name>` contents out as a model folder of our own."""
        root = Path(tempfile.mkdtemp(prefix=f"infera-{name}-"))
        model_dir = root / name
        for relative, content in files.items():
            target = (model_dir / relative).resolve()
            if not target.is_relative_to(model_dir.resolve()) or relative.startswith("/"):
                shutil.rmtree(root, ignore_errors=True)
                raise InvalidArgument(f"file path '{relative}' leaves the model folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        old = self._temp_dirs.pop(name, None)
        self._temp_dirs[name] = root
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return model_dir

    async def unload_model(self, name: str) -> None:
        await self.manager.unload(name)

    def set_active_version(self, name: str, version: int) -> None:
        self.manager.set_active(name, version)

    def get_model(self, name: str, version: int | None = None) -> ServedVersion:
        return self.manager.get(name, version)

    def model_ready(self, name: str, version: int | None = None) -> bool:
        try:
            return self.manager.get(name, version).state is ModelState.READY
        except InferaError:
            return False

    def model_metadata(self, name: str, version: int | None = None) -> dict:
        served = self.manager.get(name, version)
        entry = self.manager.models[name]
        config = served.config
        batch = [-1] if config.max_batch_size > 0 else []
        return {
            "name": name,
            "versions": [str(v) for v in sorted(entry.versions)],
            "platform": config.platform or config.backend_name,
            "inputs": [{"name": t.name, "datatype": t.datatype, "shape": batch + list(t.dims)} for t in config.input],
            "outputs": [{"name": t.name, "datatype": t.datatype, "shape": batch + list(t.dims)} for t in config.output],
        }

    def model_config(self, name: str, version: int | None = None) -> ModelConfig:
        return self.manager.get(name, version).config

    def model_config_dict(self, name: str, version: int | None = None) -> dict:
        return config_to_dict(self.model_config(name, version))

    def repository_index(self, ready_only: bool = False) -> list[dict]:
        """Every model of the repository and every loaded version, with state and reason (Triton's index)."""
        rows: dict[tuple[str, str], dict] = {}
        if self.repository is not None:
            for name in self.repository.model_names():
                rows[(name, "")] = {"name": name}
        for name, entry in self.manager.models.items():
            rows.pop((name, ""), None)
            for version, served in entry.versions.items():
                row = {"name": name, "version": str(version), "state": served.state.value}
                if served.reason:
                    row["reason"] = served.reason
                rows[(name, str(version))] = row
            for version, reason in entry.failures.items():
                if version not in entry.versions:
                    rows[(name, str(version))] = {
                        "name": name,
                        "version": str(version),
                        "state": "UNAVAILABLE",
                        "reason": reason,
                    }
            if not entry.versions and not entry.failures:
                rows[(name, "")] = {"name": name, "state": "UNAVAILABLE", "reason": entry.error or "unloaded"}
        result = [rows[k] for k in sorted(rows)]
        if ready_only:
            result = [r for r in result if r.get("state") == "READY"]
        return result

    def served_versions(self) -> list[ServedVersion]:
        """Every loaded version (for stats and metrics)."""
        return [s for entry in self.manager.models.values() for s in entry.versions.values()]

    def statistics(self, name: str | None = None, version: int | None = None) -> dict:
        if name is None:
            served = sorted(self.served_versions(), key=lambda s: (s.name, s.version))
        elif version is None:
            self.manager.get(name)  # raises for an unknown model
            served = sorted(self.manager.models[name].versions.values(), key=lambda s: s.version)
        else:
            served = [self.manager.get(name, version)]
        return {"model_stats": [s.stats.to_dict() for s in served]}

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        return await self.manager.get(request.model_name, request.model_version).infer(request)


def _gpus(count: int | None) -> int:
    return gpu_count() if count is None else count


def _numeric_dirs(model_dir: Path) -> dict[int, Path]:
    return {int(p.name): p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()}


def _config_override(name: str, config: dict | str | None) -> dict | None:
    """Triton's `parameters.config`: a JSON string (or dict) of a possibly partial ModelConfig."""
    if config is None or config == "":
        return None
    if isinstance(config, dict):
        return config
    try:
        value = orjson.loads(config)
    except orjson.JSONDecodeError as exc:
        raise LoadError(f"failed to load '{name}': parameters.config is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise LoadError(f"failed to load '{name}': parameters.config must be a JSON object")
    return value


__all__ = ["InferenceServer", "ModelNotFound"]
