"""`serve`'s model control flags (Triton's --model-control-mode, --load-model, --repository-poll-secs and
--model-repository): each in place of its variable, checked before anything starts, handed on to the workers."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import CommandError, call_command

from console.hosting import workers
from console.management.commands.serve import model_control

FLAGS = ("model_control_mode", "load_model", "repository_poll_secs", "model_repository")


def options(**given: Any) -> dict[str, Any]:
    return {flag: None for flag in FLAGS} | given


def test_serve_refuses_a_bad_mode_or_a_poll_without_its_folder() -> None:
    with pytest.raises(CommandError, match="^--model-control-mode must be one of none, poll, explicit"):
        call_command("serve", "--model-control-mode", "manual")
    with pytest.raises(CommandError, match="needs INFERA_MODEL_REPOSITORY"):
        call_command("serve", "--model-control-mode", "poll")
    with pytest.raises(CommandError, match="only with model control mode explicit"):
        call_command("serve", "--model-control-mode", "none", "--load-model", "simple")


def test_the_flags_set_the_engines_model_control(monkeypatch, tmp_path) -> None:
    for variable in ("INFERA_MODEL_CONTROL_MODE", "INFERA_LOAD_MODELS", "INFERA_REPOSITORY_POLL_SECS"):
        monkeypatch.delenv(variable, raising=False)
    assert model_control(options()) == {}
    polled = model_control(options(model_control_mode="poll", repository_poll_secs="3", model_repository=str(tmp_path)))
    control = polled["model_control"]
    assert (control.mode, control.poll_seconds, control.repository) == ("poll", 3, tmp_path)
    assert model_control(options(load_model=["a", "b"]))["model_control"].load_models == ("a", "b")


def test_the_workers_get_the_model_control(worker_commands, settings, tmp_path) -> None:
    infera = settings.INFERA.replace(**model_control(options(load_model=["simple"])))
    workers.run_workers("127.0.0.1", 8000, 2, infera, {"server": "uvicorn", "no_access_log": False})
    command = " ".join(worker_commands[0])
    assert "--model-control-mode explicit --repository-poll-secs 15 --load-model simple" in command
