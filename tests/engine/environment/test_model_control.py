"""Triton's model control settings read strictly: the mode, --load-model and the poll interval and folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.environment.model_control import ModelControl, read_model_control
from engine.environment.values import SettingError


def test_it_defaults_to_explicit_with_repository_control_open() -> None:
    control = read_model_control({})
    assert control == ModelControl()
    assert control.mode == "explicit" and control.repository_control_open


def test_it_reads_every_mode_in_any_case(tmp_path: Path) -> None:
    assert read_model_control({"INFERA_MODEL_CONTROL_MODE": "NONE"}).mode == "none"
    polled = read_model_control({"INFERA_MODEL_CONTROL_MODE": "Poll", "INFERA_MODEL_REPOSITORY": str(tmp_path)})
    assert (polled.mode, polled.repository, polled.poll_seconds) == ("poll", tmp_path, 15)
    assert not polled.repository_control_open


def test_it_refuses_an_unknown_mode() -> None:
    with pytest.raises(SettingError, match="INFERA_MODEL_CONTROL_MODE must be one of none, poll, explicit"):
        read_model_control({"INFERA_MODEL_CONTROL_MODE": "manual"})
    with pytest.raises(SettingError, match="--model-control-mode must be one of"):
        read_model_control({}, mode="sometimes")


def test_it_needs_a_folder_to_poll(tmp_path: Path) -> None:
    with pytest.raises(SettingError, match="needs INFERA_MODEL_REPOSITORY"):
        read_model_control({"INFERA_MODEL_CONTROL_MODE": "poll"})
    with pytest.raises(SettingError, match="is not a folder"):
        read_model_control({}, mode="poll", repository=str(tmp_path / "missing"))


def test_it_bounds_the_poll_interval(tmp_path: Path) -> None:
    env = {"INFERA_MODEL_CONTROL_MODE": "poll", "INFERA_MODEL_REPOSITORY": str(tmp_path)}
    assert read_model_control({**env, "INFERA_REPOSITORY_POLL_SECS": "2"}).poll_seconds == 2
    for wrong in ("0", "86401", "soon"):
        with pytest.raises(SettingError, match="INFERA_REPOSITORY_POLL_SECS"):
            read_model_control({**env, "INFERA_REPOSITORY_POLL_SECS": wrong})


def test_it_reads_load_models_as_triton_takes_them() -> None:
    assert read_model_control({"INFERA_LOAD_MODELS": "simple, digits,simple"}).load_models == ("simple", "digits")
    assert read_model_control({}, load_models=["*"]).load_models == ("*",)
    with pytest.raises(SettingError, match="must be the only model named"):
        read_model_control({}, load_models=["*", "simple"])
    with pytest.raises(SettingError, match="is invalid"):
        read_model_control({"INFERA_LOAD_MODELS": "../etc"})


def test_it_refuses_load_models_outside_explicit_mode() -> None:
    with pytest.raises(SettingError, match="only with model control mode explicit, not none"):
        read_model_control({"INFERA_MODEL_CONTROL_MODE": "none", "INFERA_LOAD_MODELS": "simple"})
