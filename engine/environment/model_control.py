"""Triton's model control modes from the environment: --model-control-mode, --load-model, --repository-poll-secs.

`explicit` (Infera's default, its behaviour before the modes): /v2 and gRPC repository load and unload are open to
callers allowed to change models; `--load-model` names models loaded at start-up (`*`: every one) besides those the
desired state already serves. `none`: the desired state serves and repository load/unload are refused with
Triton's UNAVAILABLE. `poll`: refused the same way, and the Triton-layout folder INFERA_MODEL_REPOSITORY is watched
every INFERA_REPOSITORY_POLL_SECS, what changes there applied (the console's RepositoryPoller).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.environment.values import SettingError, int_value, read_text

MODES = ("none", "poll", "explicit")
EVERY_MODEL = "*"
MAX_POLL_SECONDS = 86_400


@dataclass(frozen=True)
class ModelControl:
    """How models are controlled: the mode, the models loaded at start-up (explicit), the folder polled (poll)."""

    mode: str = "explicit"  # INFERA_MODEL_CONTROL_MODE: none, poll or explicit
    load_models: tuple[str, ...] = ()  # INFERA_LOAD_MODELS: explicit only; ("*",) is every model
    poll_seconds: int = 15  # INFERA_REPOSITORY_POLL_SECS: Triton's --repository-poll-secs default
    repository: Path | None = None  # INFERA_MODEL_REPOSITORY: the folder poll watches

    @property
    def repository_control_open(self) -> bool:
        """Whether /v2 and gRPC repository load and unload are taken (explicit), or refused as Triton refuses them."""
        return self.mode == "explicit"


def read_model_control(
    env: Mapping[str, str],
    mode: str | None = None,
    load_models: Sequence[str] | None = None,
    poll_seconds: str | None = None,
    repository: str | None = None,
) -> ModelControl:
    """ModelControl from the variables, each argument given (serve's flags) in place of its variable."""
    raw_mode = mode if mode is not None else read_text("INFERA_MODEL_CONTROL_MODE", env)
    where = "--model-control-mode" if mode is not None else "INFERA_MODEL_CONTROL_MODE"
    chosen = (raw_mode or "explicit").strip().lower() or "explicit"
    if chosen not in MODES:
        raise SettingError(f"{where} must be one of {', '.join(MODES)}, got {raw_mode!r}")
    names = _load_models(env, load_models)
    if names and chosen != "explicit":
        raise SettingError(
            f"--load-model (INFERA_LOAD_MODELS) takes effect only with model control mode explicit, not {chosen}"
        )
    raw_poll = poll_seconds if poll_seconds is not None else read_text("INFERA_REPOSITORY_POLL_SECS", env)
    seconds = ModelControl.poll_seconds
    if raw_poll is not None and raw_poll.strip():
        seconds = int_value("INFERA_REPOSITORY_POLL_SECS", raw_poll)
        if not 1 <= seconds <= MAX_POLL_SECONDS:
            raise SettingError(f"INFERA_REPOSITORY_POLL_SECS must be between 1 and {MAX_POLL_SECONDS}, got {seconds}")
    raw_folder = repository if repository is not None else read_text("INFERA_MODEL_REPOSITORY", env)
    folder = Path(raw_folder.strip()) if raw_folder and raw_folder.strip() else None
    if chosen == "poll":
        if folder is None:
            raise SettingError(
                "model control mode poll needs INFERA_MODEL_REPOSITORY (serve --model-repository): the Triton-layout "
                "folder to watch"
            )
        if not folder.is_dir():
            raise SettingError(f"INFERA_MODEL_REPOSITORY '{folder}' is not a folder")
    return ModelControl(mode=chosen, load_models=names, poll_seconds=seconds, repository=folder)


def _load_models(env: Mapping[str, str], given: Sequence[str] | None) -> tuple[str, ...]:
    from engine.config.names import model_name_problem

    if given is None:
        raw = read_text("INFERA_LOAD_MODELS", env) or ""
        given = [part for part in raw.split(",") if part.strip()]
    names = tuple(dict.fromkeys(name.strip() for name in given))
    if EVERY_MODEL in names and len(names) > 1:
        raise SettingError("--load-model=* (INFERA_LOAD_MODELS=*) must be the only model named: it loads every one")
    for name in names:
        if name != EVERY_MODEL and (problem := model_name_problem(name)) is not None:
            raise SettingError(f"--load-model (INFERA_LOAD_MODELS): model name {name!r} is invalid: {problem}")
    return names
