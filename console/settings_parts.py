"""Settings blocks built from parsed environment values (kept apart from settings.py so tests can call them)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dj_database_url

from console.config import DATABASE_SCHEMES
from console.env import EnvError


def database_settings(url: str | None, default_sqlite: Path) -> dict[str, Any]:
    """Django's DATABASES['default'] from DATABASE_URL: SQLite under var/ when unset, PostgreSQL when asked."""
    if url is None:
        url = f"sqlite:///{default_sqlite}"
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in DATABASE_SCHEMES:
        raise EnvError(
            "DATABASE_URL must start with sqlite:// or postgres:// (postgresql://), "
            f"got a URL with scheme {scheme or 'none'!r}"
        )
    try:
        # 0: under ASGI each request may run on another thread; persistent connections would pile up
        config = dj_database_url.parse(url, conn_max_age=0)
    except ValueError as exc:
        raise EnvError(f"DATABASE_URL cannot be parsed: {exc}") from None
    if not config.get("NAME"):
        raise EnvError("DATABASE_URL names no database (add /NAME after the host, or a file path for SQLite)")
    if config["ENGINE"] == "django.db.backends.sqlite3":
        _private_file(Path(config["NAME"]))
        config["OPTIONS"] = {
            # the console, the reconciler and seed_demo write from several threads: wait, and take the write
            # lock when a transaction begins instead of failing on upgrade
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    return config


def _private_file(path: Path) -> None:
    """Create the SQLite file readable by its owner only (it holds password hashes and the audit log)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    except OSError:
        return  # a read-only or special location: SQLite reports what it cannot do itself
    if path.is_file() and path.stat().st_mode & 0o077:
        path.chmod(0o600)


def channel_layer_settings(redis_url: str | None, peers_directory: Path | None = None) -> dict[str, Any]:
    """CHANNEL_LAYERS: Redis when REDIS_URL is set (several replicas); otherwise in memory, shared with the other
    workers of `serve --workers` through sockets in `peers_directory` (console/peers/layer.py)."""
    if redis_url is None:
        if peers_directory is None:
            return {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
        return {
            "default": {"BACKEND": "console.peers.layer.LocalPeerLayer", "CONFIG": {"directory": str(peers_directory)}}
        }
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [redis_url]},
        }
    }
