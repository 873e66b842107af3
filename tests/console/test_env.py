"""Strict environment readers: a wrong value is an error that names the variable; *_FILE holds secrets."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from console.env import (
    EnvError,
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_path,
    env_str,
    env_url,
    secret_from_file,
)


def test_it_reads_booleans_in_their_usual_spellings():
    for raw, expected in [("1", True), ("TRUE", True), ("yes", True), ("on", True), ("0", False), ("Off", False)]:
        assert env_bool("INFERA_DEBUG", not expected, environ={"INFERA_DEBUG": raw}) is expected


def test_it_names_the_variable_of_a_bad_boolean():
    with pytest.raises(EnvError, match="INFERA_DEBUG must be a boolean.*'maybe'"):
        env_bool("INFERA_DEBUG", False, environ={"INFERA_DEBUG": "maybe"})


def test_it_takes_the_default_when_unset_or_blank():
    assert env_bool("INFERA_DEBUG", True, environ={}) is True
    assert env_int("PORT", 8000, environ={"PORT": " "}) == 8000
    assert env_list("INFERA_ALLOWED_HOSTS", ["localhost"], environ={}) == ["localhost"]


def test_it_reads_a_secret_from_the_file_variant(tmp_path: Path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret-value\n")
    assert env_str("INFERA_SECRET_KEY", environ={"INFERA_SECRET_KEY_FILE": str(secret)}) == "s3cret-value"


def test_it_reads_a_boolean_from_the_file_variant(tmp_path: Path):
    flag = tmp_path / "debug"
    flag.write_text("true\n")
    assert env_bool("INFERA_DEBUG", False, environ={"INFERA_DEBUG_FILE": str(flag)}) is True


def test_it_refuses_both_the_variable_and_its_file_variant(tmp_path: Path):
    with pytest.raises(EnvError, match="INFERA_SECRET_KEY and INFERA_SECRET_KEY_FILE are both set"):
        env_str("INFERA_SECRET_KEY", environ={"INFERA_SECRET_KEY": "a", "INFERA_SECRET_KEY_FILE": "/x"})


def test_it_names_the_file_variant_it_cannot_read(tmp_path: Path):
    missing = tmp_path / "nope"
    with pytest.raises(EnvError, match=f"DATABASE_URL_FILE: cannot read '{missing}'"):
        env_str("DATABASE_URL", environ={"DATABASE_URL_FILE": str(missing)})


def test_it_checks_whole_numbers_and_their_bounds():
    assert env_int("INFERA_MAX_UPLOAD_MB", 1, minimum=1, environ={"INFERA_MAX_UPLOAD_MB": "64"}) == 64
    with pytest.raises(EnvError, match="INFERA_MAX_UPLOAD_MB must be a whole number, got '1.5'"):
        env_int("INFERA_MAX_UPLOAD_MB", 1, environ={"INFERA_MAX_UPLOAD_MB": "1.5"})
    with pytest.raises(EnvError, match="INFERA_MAX_UPLOAD_MB must be at least 1, got 0"):
        env_int("INFERA_MAX_UPLOAD_MB", 1, minimum=1, environ={"INFERA_MAX_UPLOAD_MB": "0"})
    with pytest.raises(EnvError, match="PORT must be at most 65535, got 70000"):
        env_int("PORT", 1, maximum=65535, environ={"PORT": "70000"})


def test_it_splits_lists_and_refuses_empty_items():
    hosts = env_list("INFERA_ALLOWED_HOSTS", [], environ={"INFERA_ALLOWED_HOSTS": "a.example, b.example"})
    assert hosts == ["a.example", "b.example"]
    with pytest.raises(EnvError, match="INFERA_ALLOWED_HOSTS has an empty item"):
        env_list("INFERA_ALLOWED_HOSTS", [], environ={"INFERA_ALLOWED_HOSTS": "a,,b"})


def test_it_accepts_only_listed_choices():
    levels = ("DEBUG", "INFO")
    assert env_choice("INFERA_LOG_LEVEL", "INFO", levels, environ={"INFERA_LOG_LEVEL": "debug"}) == "DEBUG"
    with pytest.raises(EnvError, match="INFERA_LOG_LEVEL must be one of DEBUG, INFO, got 'loud'"):
        env_choice("INFERA_LOG_LEVEL", "INFO", levels, environ={"INFERA_LOG_LEVEL": "loud"})


def test_it_resolves_relative_paths_from_the_project(tmp_path: Path):
    path = env_path("INFERA_MODEL_STORE", tmp_path / "d", base=tmp_path, environ={"INFERA_MODEL_STORE": "m"})
    assert path == tmp_path / "m"
    absolute = env_path("INFERA_MODEL_STORE", tmp_path, base=tmp_path, environ={"INFERA_MODEL_STORE": "/srv/m"})
    assert absolute == Path("/srv/m")


def test_it_checks_url_schemes_without_echoing_the_url():
    assert env_url("REDIS_URL", ("redis",), environ={"REDIS_URL": "redis://127.0.0.1:6379/0"})
    with pytest.raises(EnvError, match="REDIS_URL must be a URL starting with redis://") as caught:
        env_url("REDIS_URL", ("redis",), environ={"REDIS_URL": "http://user:hunter2@host"})
    assert "hunter2" not in str(caught.value)


def test_it_generates_a_secret_once_and_keeps_it_private(tmp_path: Path):
    path = tmp_path / "var" / "secret_key"
    first = secret_from_file(path)
    assert len(first) >= 50
    assert secret_from_file(path) == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
