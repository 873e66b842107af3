"""Settings blocks from DATABASE_URL and REDIS_URL, and start-up refusing a wrong value by its name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from console.env import EnvError
from console.settings_parts import channel_layer_settings, database_settings

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_it_parses_a_postgresql_url():
    config = database_settings("postgres://infera:pw@db.internal:5433/infera", default_sqlite=Path("/x.db"))
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert (config["HOST"], config["PORT"], config["NAME"]) == ("db.internal", 5433, "infera")
    assert (config["USER"], config["PASSWORD"]) == ("infera", "pw")
    assert config["CONN_MAX_AGE"] == 0


def test_it_defaults_to_sqlite_under_var(tmp_path: Path):
    config = database_settings(None, default_sqlite=tmp_path / "var" / "infera.sqlite3")
    assert config["ENGINE"] == "django.db.backends.sqlite3"
    assert config["NAME"] == str(tmp_path / "var" / "infera.sqlite3")
    assert (tmp_path / "var").is_dir()
    assert config["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


def test_it_names_database_url_for_an_unsupported_scheme():
    with pytest.raises(EnvError, match="DATABASE_URL must start with sqlite:// or postgres://"):
        database_settings("mysql://root@localhost/test", default_sqlite=Path("/x.db"))


def test_it_names_database_url_without_a_database():
    with pytest.raises(EnvError, match="DATABASE_URL names no database"):
        database_settings("postgres://postgres@localhost", default_sqlite=Path("/x.db"))


def test_it_uses_redis_for_channels_only_when_asked():
    assert channel_layer_settings(None)["default"]["BACKEND"] == "channels.layers.InMemoryChannelLayer"
    local = channel_layer_settings(None, peers_directory=Path("/srv/var/peers"))["default"]
    assert local == {"BACKEND": "console.peers.layer.LocalPeerLayer", "CONFIG": {"directory": "/srv/var/peers"}}
    redis = channel_layer_settings("redis://127.0.0.1:6379/1")["default"]
    assert redis["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    assert redis["CONFIG"]["hosts"] == ["redis://127.0.0.1:6379/1"]


def test_it_installs_the_apps_the_design_names():
    for app in ["django.contrib.admin", "rest_framework", "drf_spectacular", "channels", "console"]:
        assert app in settings.INSTALLED_APPS
    assert settings.INFERA.max_upload_bytes == settings.INFERA.max_upload_mb * 1024 * 1024


@pytest.mark.parametrize(
    ("variable", "value"),
    [("INFERA_DEBUG", "maybe"), ("INFERA_MAX_UPLOAD_MB", "lots"), ("DATABASE_URL", "mongodb://x/y")],
)
def test_it_stops_start_up_naming_the_wrong_variable(tmp_path: Path, variable: str, value: str):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env |= {"INFERA_VAR_DIR": str(tmp_path), variable: value}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert variable in result.stderr.strip().splitlines()[-1]
