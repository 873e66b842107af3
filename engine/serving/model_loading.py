"""Loading a model into the model manager: from the repository, from explicit version folders, or from the files
sent with a load (Triton's `file:<version>/<name>` parameters), each through the admission checks every load passes
(who asks, the code it runs, the server's limits, ensemble cycles), an ensemble's composing models and a LoRA
adapter's base model first.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path, PurePosixPath

from engine.config.model_config import ModelConfig
from engine.config.names import check_model_name, normalise_files
from engine.config.text_format import load_json, parse_config_json
from engine.ensembles.plan import EnsemblePlan, step_models
from engine.errors import Forbidden, InferaError, InvalidArgument, LoadError
from engine.serving import admission
from engine.serving.admission import Principal
from engine.serving.lifecycle import ModelManager
from engine.serving.repository import ModelRepository, complete_config, resolve_config, select_versions
from engine.settings import EngineSettings

log = logging.getLogger("infera.engine")

Admit = Callable[..., Awaitable[ModelConfig]]  # InferenceServer.admit: a version from outside, trial-loaded


class ModelLoader:
    """Loads models into one server's manager; owns the temporary folders of the models loaded from sent files."""

    def __init__(
        self, repository: ModelRepository | None, manager: ModelManager, settings: EngineSettings, admit: Admit
    ) -> None:
        self.repository = repository
        self.manager = manager
        self.settings = settings
        self.admit = admit
        self._sent_files: dict[str, Path] = {}  # models loaded from files sent with a load: their temporary roots

    async def load(
        self,
        name: str,
        *,
        config: dict | str | None,
        files: dict[str, bytes] | None,
        versions: dict[int, Path] | None,
        version_configs: dict[int, ModelConfig] | None,
        active_version: int | None,
        caller: Principal,
        chain: frozenset[str],
    ) -> None:
        """InferenceServer.load_model, for an ensemble's composing model too: `chain` holds the ensembles loading
        it."""
        check_model_name(name)
        if not caller.may_change_models:
            raise Forbidden(f"'{caller.name}' may not load models ('{name}')")
        override = config_override(name, config)
        try:
            if files:
                await self._load_sent_files(name, normalise_files(files), override, caller)
                return
            if versions:
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
            # completing a config may run the model's code (a python model's auto_complete_config): decide first
            for version, given in [(max(version_paths), raw), *(version_configs or {}).items()]:
                if version in version_paths:
                    resolved, _ = resolve_config(name, model_dir, version_paths[version], given, override)
                    admission.check_code(resolved, caller, self.settings)
            effective = complete_config(name, model_dir, latest, raw, override)
            if not versions:
                selected = select_versions(effective.version_policy, sorted(version_paths))
                version_paths = {v: version_paths[v] for v in selected}
            configs = {
                v: complete_config(name, model_dir, version_paths[v], given, override)
                for v, given in (version_configs or {}).items()
                if v in version_paths
            }
            for checked in [effective, *configs.values()]:
                admission.check_code(checked, caller, self.settings)
                admission.check_limits(checked, self.settings.limits)
            admission.check_ensemble_cycle(name, [effective, *configs.values()], self.ensemble_calls)
            if effective.backend_name == "ensemble":
                await self._load_needed_models(name, EnsemblePlan(effective).models(), caller, chain | {name})
            elif effective.backend_name == "lora":  # a LoRA adapter's base model first (engine/backends/lora.py)
                base = str(effective.parameters.get("base_model", "")).strip()
                await self._load_needed_models(name, [base] if base else [], caller, chain | {name})
            await self.manager.load(effective, version_paths, active_version, configs=configs)
            self.forget_sent_files(name)  # it serves from the repository now, not from files it was sent
        except Forbidden:
            raise
        except InferaError as exc:
            if isinstance(exc, LoadError) and exc.about_model:
                raise
            self.manager.record_error(name, exc.message)
            raise LoadError(exc.message, model=name) from exc

    async def _load_sent_files(
        self, name: str, files: dict[PurePosixPath, bytes], override: dict | None, caller: Principal
    ) -> None:
        """Triton's `file:<version>/<name>` contents as a model folder of our own, admitted version by version.

        The folder is removed on every failure; on success it replaces the one this model was loaded from before.
        """
        root = Path(tempfile.mkdtemp(prefix="infera-files-"))
        model_dir = root / name
        try:
            for relative, content in files.items():
                target = model_dir.joinpath(*relative.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
            version_paths = _numeric_dirs(model_dir)
            if not version_paths:
                raise LoadError(f"model '{name}' has no numeric version folder")
            raw = parse_config_json(override) if override else None
            configs = {}
            for number, path in sorted(version_paths.items()):
                try:
                    configs[number] = await self.admit(name, path, raw, caller=caller)
                except LoadError as exc:
                    raise LoadError(exc.reason, model=name, version=number) from exc
            latest = configs[max(configs)]
            selected = select_versions(latest.version_policy, sorted(version_paths))
            await self.manager.load(latest, {v: version_paths[v] for v in selected}, configs=configs)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        previous = self._sent_files.pop(name, None)
        self._sent_files[name] = root
        if previous is not None:
            shutil.rmtree(previous, ignore_errors=True)

    async def _load_needed_models(
        self, name: str, models: Iterable[str], caller: Principal, chain: frozenset[str]
    ) -> None:
        """Load the models `name` needs (an ensemble's steps call, as Triton does; a LoRA adapter's base) that the
        repository has and the engine does not serve yet; one that fails leaves `name` UNAVAILABLE with the reason.
        A model already on the `chain` of models being loaded is not loaded again (a cycle stored before it was
        refused ends here)."""
        for model in models:
            if model in chain:
                continue
            entry = self.manager.models.get(model)
            if entry is not None and entry.versions:
                continue
            if self.repository is None or model not in self.repository.model_names():
                continue
            try:
                await self.load(
                    model,
                    config=None,
                    files=None,
                    versions=None,
                    version_configs=None,
                    active_version=None,
                    caller=caller,
                    chain=chain,
                )
            except InferaError as exc:
                log.warning("model '%s' needs model '%s', which did not load: %s", name, model, exc.message)

    def ensemble_calls(self, name: str) -> set[str]:
        """The models the ensemble `name` calls as this engine knows it: its loaded versions and its repository
        config (nothing for a model that is no ensemble, or whose config does not read)."""
        calls: set[str] = set()
        entry = self.manager.models.get(name)
        if entry is not None:
            for served in entry.versions.values():
                calls.update(step_models(served.config))
        if self.repository is not None and name in self.repository.model_names():
            try:
                raw = self.repository.read_config(name)
            except InferaError:
                raw = None
            if raw is not None:
                calls.update(step_models(raw))
        return calls

    def forget_sent_files(self, name: str) -> bool:
        """Remove the folder of files a model was loaded from, when it had one."""
        sent = self._sent_files.pop(name, None)
        if sent is not None:
            shutil.rmtree(sent, ignore_errors=True)
        return sent is not None

    def close(self) -> None:
        """Remove every folder of sent files (the server stops)."""
        for path in self._sent_files.values():
            shutil.rmtree(path, ignore_errors=True)
        self._sent_files.clear()


def _numeric_dirs(model_dir: Path) -> dict[int, Path]:
    return {int(p.name): p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()}


def config_override(name: str, config: dict | str | None) -> dict | None:
    """Triton's `parameters.config`: a JSON string (or dict) of a possibly partial ModelConfig."""
    if config is None or config == "":
        return None
    if isinstance(config, dict):
        return config
    try:
        value = load_json(config, "parameters.config")  # nested at most MAX_JSON_DEPTH levels
    except InvalidArgument as exc:
        raise LoadError(exc.message, model=name) from None
    if not isinstance(value, dict):
        raise LoadError("parameters.config must be a JSON object", model=name)
    return value
