"""Whether a model version may enter the engine: who asks, whether it runs code, whether its config fits the machine.

This is the one place that decides "this load runs code" (a python model, a torch.export archive): on the resolved
config of the backend that will really load the version, after file names were normalised, for every entry point
(uploads, /v2 repository loads, gRPC, imports, the engine's own start-up). A caller is a `Principal`; the console
maps its users and roles onto one, the engine never sees a role. Versions from outside are admitted with a trial
load in a sandboxed child process (engine.isolation.sandbox) before they may serve.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.backends import get_backend
from engine.config.datatypes import config_to_wire, numpy_dtype
from engine.config.model_config import ModelConfig, VersionPolicy
from engine.config.names import check_model_name
from engine.config.validate import validate_config
from engine.ensembles.plan import cycle_error, ensemble_cycle, step_models
from engine.errors import CodeRefused, Forbidden, InferaError, InvalidArgument, LoadError
from engine.serving.placement import trial_load
from engine.serving.repository import (
    MODEL_FILE_BACKENDS,
    ModelRepository,
    complete_config,
    numbered_folders,
    resolve_config,
    select_versions,
)
from engine.settings import ConfigLimits, EngineSettings

if TYPE_CHECKING:
    from engine.llm.budgets import Budget

# the model files a version folder may hold, one per backend
MODEL_FILES = tuple(MODEL_FILE_BACKENDS)
THREAD_PARAMETERS = ("intra_op_thread_count", "inter_op_thread_count", "INTRA_OP_THREAD_COUNT", "INTER_OP_THREAD_COUNT")


@dataclass(frozen=True)
class Principal:
    """Who asks the engine for something, and what they may do; built by whoever authenticated them.

    `name` is what logs and the audit log show; `user_id` and `token_id` let the console find its records again;
    `budgets` are the token budgets the console set on the user and the token (engine/llm/budgets.py).
    """

    name: str
    may_change_models: bool = False
    may_load_code: bool = False
    role: str = ""
    user_id: int | None = None
    token_id: int | None = None
    budgets: tuple[Budget, ...] = ()

    @property
    def authenticated(self) -> bool:
        return self.user_id is not None


# the process itself: its own model repository at start-up, the registry's reconciler, the command line
SYSTEM = Principal("system", may_change_models=True, may_load_code=True)
# a caller on a connection the server leaves open, who presented no credentials
ANONYMOUS = Principal("anonymous")


def may_not_change(principal: Principal, model: str) -> Forbidden:
    """The refusal of a caller who may not load or unload models, in words that say what it needs."""
    if principal.authenticated:
        return Forbidden(
            f"role '{principal.role or 'none'}' may not load or unload models ('{model}'): it needs operator or admin"
        )
    return Forbidden(
        f"loading and unloading models ('{model}') needs an API token of an operator or admin: send "
        "'Authorization: Bearer <key>' (or open repository control with INFERA_OPEN_REPOSITORY_CONTROL=true)"
    )


def code_reason(config: ModelConfig) -> str | None:
    """Why loading a version with this (resolved) config runs code in the loading process, or None."""
    return get_backend(config.backend_name).code_in(config)


def check_code(config: ModelConfig, caller: Principal, settings: EngineSettings) -> None:
    """Raise CodeRefused (403) when the version runs code and the server or the caller does not allow it."""
    reason = code_reason(config)
    if reason is None:
        return
    if not settings.allow_code:
        raise CodeRefused(
            "python-backend models and other models that run code are disabled on this server "
            f"(INFERA_ALLOW_PYTHON_MODELS=false): {reason}"
        )
    if not caller.may_load_code:
        if caller.may_change_models and not caller.authenticated and caller.name == ANONYMOUS.name:
            raise CodeRefused(
                "open repository control (INFERA_OPEN_REPOSITORY_CONTROL) loads models without code only: "
                f"{reason}; loading it needs an admin's API token (or INFERA_OPEN_REPOSITORY_CONTROL_ALLOWS_CODE=true, "
                "which lets anyone who reaches the server run code in it)"
            )
        raise CodeRefused(f"only admins may upload python-backend models or other models that run code ({reason})")


def check_limits(config: ModelConfig, limits: ConfigLimits) -> None:
    """Raise InvalidArgument naming the field when the config asks for more than this server allows."""
    prefix = f"model '{config.name}'"
    if config.max_batch_size > limits.max_batch_size:
        raise InvalidArgument(f"{prefix}: max_batch_size {config.max_batch_size} is over {limits.max_batch_size}")
    for role, tensors in (("input", config.input), ("output", config.output)):
        for tensor in tensors:
            for field_name, dims in (("dims", tensor.dims), ("reshape", tensor.reshape or [])):
                if any(dim > limits.max_dim for dim in dims):
                    raise InvalidArgument(
                        f"{prefix}: {role} '{tensor.name}': {field_name} {dims} has a dimension over {limits.max_dim}"
                    )
    instances = sum(group.count * max(len(group.gpus), 1) for group in config.instance_group)
    if instances > limits.max_instances:
        raise InvalidArgument(
            f"{prefix}: instance_group asks for {instances} instances, over the limit of {limits.max_instances} "
            "(INFERA_MAX_INSTANCES)"
        )
    for key in THREAD_PARAMETERS:
        raw = config.parameters.get(key, "")
        if raw.strip().isdigit() and int(raw) > limits.max_threads:
            raise InvalidArgument(
                f"{prefix}: parameter '{key}' asks for {int(raw)} threads, over the limit of {limits.max_threads} "
                "(INFERA_MAX_THREADS)"
            )
    for sample in config.model_warmup:
        where = f"{prefix}: model_warmup '{sample.name}'"
        if sample.count > limits.max_warmup_count:
            raise InvalidArgument(
                f"{where}: count {sample.count} is over the limit of {limits.max_warmup_count} "
                "(INFERA_MAX_WARMUP_COUNT)"
            )
        size = warmup_bytes(config, sample)
        if size > limits.max_warmup_bytes:
            raise InvalidArgument(
                f"{where}: its inputs take {size / 2**20:.0f} MB, over the limit of "
                f"{limits.max_warmup_bytes / 2**20:.0f} MB (INFERA_MAX_WARMUP_MB)"
            )


def check_ensemble_cycle(name: str, configs: Iterable[ModelConfig], calls: Callable[[str], Iterable[str]]) -> None:
    """Raise InvalidArgument naming the cycle when the model `name`, with `configs` (the versions about to enter),
    would call itself through ensemble steps; `calls(other)` names the models another model's versions call.

    The check of the whole picture that one config alone cannot make: a load that recursed for ever, and a start-up
    that never ended, came of an ensemble naming itself or two naming each other.
    """
    own = {model for config in configs for model in step_models(config)}
    path = ensemble_cycle(name, lambda model: own if model == name else calls(model))
    if path is not None:
        raise cycle_error(path)


def warmup_bytes(config: ModelConfig, sample) -> int:
    """Bytes one warm-up sample's inputs take (BYTES elements count one byte each, as the engine fills them)."""
    total = 0
    for spec in sample.inputs.values():
        elements = math.prod([sample.batch_size if config.max_batch_size > 0 else 1, *(max(d, 1) for d in spec.dims)])
        wire = config_to_wire(spec.data_type) if spec.data_type else "BYTES"
        itemsize = 1 if wire == "BYTES" else numpy_dtype(wire).itemsize
        total += elements * itemsize
    return total


def check_admissible(
    name: str,
    version_dir: Path,
    config: ModelConfig | None,
    caller: Principal,
    settings: EngineSettings,
    override: dict | None = None,
) -> ModelConfig:
    """The resolved config of a version, once its name is valid and its code (if any) is allowed; no file is read.

    Callers that record a version before trial-loading it (the registry) ask this first, so a refused caller leaves
    no trace.
    """
    check_model_name(name)
    resolved, _ = resolve_config(name, Path(version_dir).parent, Path(version_dir), config, override)
    check_code(resolved, caller, settings)
    return resolved


def check_config(
    name: str, version_dir: Path, config: ModelConfig, caller: Principal, settings: EngineSettings
) -> ModelConfig:
    """A config edited for a stored version, checked as its load would check it, with nothing loaded: the name, the
    code decision, completion against the model file (where that runs no code) and validation, the limits.

    Returns the effective config. Quick enough to answer as someone types; saving it still trial-loads (`admit`).
    """
    resolved = check_admissible(name, version_dir, config, caller, settings)
    if code_reason(resolved) is None:
        try:
            resolved = complete_config(name, Path(version_dir).parent, Path(version_dir), resolved)
        except InferaError:
            validate_config(resolved)  # a mistake in the config itself explains more than the model disagreeing
            raise
    else:
        validate_config(resolved)  # completing it would run the model's code: that waits for the sandboxed trial
    check_limits(resolved, settings.limits)
    return resolved


@dataclass(frozen=True)
class Admissible:
    """A version that passed the admissibility check (its name, the code decision for its caller, the server's
    limits), not yet trial-loaded: `check` makes it once, `admit` trial-loads it without checking it again.

    `config` is resolved (name, backend, platform filled) from the version folder's files, which a caller may move
    (the registry renames its staged folder) before the trial load."""

    name: str
    config: ModelConfig
    caller: Principal


def check(
    name: str,
    version_dir: Path,
    config: ModelConfig | None,
    caller: Principal,
    settings: EngineSettings,
    override: dict | None = None,
) -> Admissible:
    """The admissibility check of a version from outside, made once: raises CodeRefused (403) or InvalidArgument."""
    resolved = check_admissible(name, version_dir, config, caller, settings, override)
    check_limits(resolved, settings.limits)
    return Admissible(name, resolved, caller)


def admit(
    name: str,
    version_dir: Path,
    config: ModelConfig | None,
    *,
    caller: Principal,
    settings: EngineSettings,
    gpus: int = 0,
    override: dict | None = None,
    checked: Admissible | None = None,
) -> ModelConfig:
    """The effective config of a version from outside, once it is allowed, within limits, and trial-loaded.

    `checked` is the version's `check`, when its caller made it already (then `config` and `override` are not
    read). Completion and the trial load run in the sandbox (unless INFERA_SANDBOX_TRIAL_LOADS is off): parsing the
    files and running the loader happen in a child process with no network and bounded resources; `gpus` is the
    machine's GPU count, against which its instance groups are placed. Raises CodeRefused (403), InvalidArgument
    (config) or LoadError (the runtime's reason).
    """
    if checked is None:
        checked = check(name, version_dir, config, caller, settings, override)
    elif checked.name != name:
        raise InvalidArgument(f"the admission check of model '{checked.name}' does not admit model '{name}'")
    resolved = checked.config
    if settings.sandbox.enabled:
        from engine.isolation.sandbox import trial_load_isolated

        effective = trial_load_isolated(name, Path(version_dir), resolved, settings.sandbox, gpus)
    else:
        effective = complete_config(name, Path(version_dir).parent, Path(version_dir), resolved)
        trial_load(effective, Path(version_dir), gpus)
    # completion may have filled the config in (batching, tensors): the filled config is what will load
    check_code(effective, checked.caller, settings)
    check_limits(effective, settings.limits)
    return effective


def version_number(version_dir: Path) -> int | None:
    """The version a folder holds, when it is named by a number."""
    name = Path(version_dir).name
    return int(name) if name.isdigit() else None


def refuse_load(name: str, version_dir: Path, error: LoadError) -> LoadError:
    """`error` as a LoadError about this model and version (for callers that keep only typed fields)."""
    return LoadError(error.reason, model=name, version=version_number(version_dir))


# ---- a read-only view of a repository on disk, for registering what it holds (the console's importer)


@dataclass(frozen=True)
class RepositoryModel:
    """One model folder of a Triton repository as written: its config, its version folders, what its policy serves."""

    name: str
    config: ModelConfig | None
    versions: dict[int, Path]
    selected: frozenset[int]
    problem: str = ""  # why the folder cannot be read as a model (its config, its version policy)


def read_repository(root: Path) -> list[RepositoryModel]:
    """Every model folder under `root`, read without loading anything."""
    repository = ModelRepository(Path(root))
    found = []
    for name in repository.model_names():
        try:
            config = repository.read_config(name)
            versions = repository.version_paths(name)
            policy = config.version_policy if config is not None else VersionPolicy()
            selected = frozenset(select_versions(policy, list(versions), name))
        except InferaError as exc:
            found.append(RepositoryModel(name, None, {}, frozenset(), exc.message))
            continue
        found.append(RepositoryModel(name, config, versions, selected))
    return found


def effective_config(name: str, version_dir: Path, config: ModelConfig | None) -> ModelConfig:
    """The completed, validated config of a version from a trusted local repository (no trial load)."""
    return complete_config(name, Path(version_dir).parent, Path(version_dir), config)


def version_folders(model_dir: Path) -> dict[int, Path]:
    """A model folder's numbered version folders (Triton's rule: 1, 2, ... never 0 or 01)."""
    return numbered_folders(Path(model_dir))
