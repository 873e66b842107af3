"""Django's cache shared by every replica: Redis when REDIS_URL is set, this process's memory while Redis is down.

Without Redis, one process keeps it in memory; the workers of `serve --workers` (INFERA_WORKERS above 1) share a
folder under var/ instead, so the sign-in lockout and the API rate hold across the workers of one port.

The sign-in lockout (accounts/login_throttle.py) and the API rate (accounts/throttling.py) count in this cache, so
with Redis they hold across replicas. While Redis does not answer, each call goes to a cache in this process's
memory instead (limits then hold per replica, as with one process), the outage is logged once, and Redis is tried
again every RETRY_SECONDS: a sign-in or an API call never fails because Redis did.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import RedisError

from console.outages import Outage

WORKER_CACHE_ENTRIES = 10_000  # keys (lockouts, rate windows) kept on disk before Django culls a third of them
RETRY_SECONDS = 1.0  # while Redis is down, how often a call tries it again
SOCKET_TIMEOUT_SECONDS = 0.5  # a Redis that does not answer (a partition) costs a call this much, once a second
# the cache methods that reach Redis (the others, decr and the async forms, are built on these)
REDIS_METHODS = (
    "add",
    "get",
    "set",
    "touch",
    "delete",
    "get_many",
    "has_key",
    "incr",
    "set_many",
    "delete_many",
    "clear",
)


def cache_settings(redis_url: str | None, *, workers: int = 1, var_dir: Path | None = None) -> dict[str, Any]:
    """CACHES: the shared cache on Redis when REDIS_URL is set; else a folder the workers of one port share, or
    this process's memory when it serves alone."""
    if redis_url is None and workers > 1 and var_dir is not None:
        return {
            "default": {
                "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
                "LOCATION": str(var_dir / "cache"),
                "KEY_PREFIX": "infera",
                "OPTIONS": {"MAX_ENTRIES": WORKER_CACHE_ENTRIES},
            }
        }
    if redis_url is None:
        return {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "KEY_PREFIX": "infera"}}
    return {
        "default": {
            "BACKEND": "console.shared_cache.SharedCache",
            "LOCATION": redis_url,
            "KEY_PREFIX": "infera",
            "OPTIONS": {
                "socket_connect_timeout": SOCKET_TIMEOUT_SECONDS,
                "socket_timeout": SOCKET_TIMEOUT_SECONDS,
            },
        }
    }


class SharedCache(RedisCache):
    """Django's RedisCache, falling back to a memory cache of this process while Redis does not answer."""

    retry_seconds = RETRY_SECONDS

    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self.local = LocMemCache(f"infera-fallback-{id(self)}", {"KEY_PREFIX": params.get("KEY_PREFIX", "")})
        self.outage = Outage("Redis (the shared cache: sign-in lockout, API rate)")
        self._retry_at = 0.0
        self._lock = threading.Lock()

    def _call(self, name: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        if self.outage.down and time.monotonic() < self._retry_at:
            return getattr(self.local, name)(*args, **kwargs)
        try:
            result = getattr(RedisCache, name)(self, *args, **kwargs)
        except RedisError as exc:
            with self._lock:
                self.outage.failed(exc)
                self._retry_at = time.monotonic() + self.retry_seconds
            return getattr(self.local, name)(*args, **kwargs)
        if self.outage.down:
            with self._lock:
                self.outage.recovered()
        return result


def _through_fallback(name: str):
    def method(self: SharedCache, *args: Any, **kwargs: Any) -> Any:
        return self._call(name, args, kwargs)

    method.__name__ = name
    method.__doc__ = f"RedisCache.{name}, or the memory cache's while Redis is down."
    return method


for _name in REDIS_METHODS:
    setattr(SharedCache, _name, _through_fallback(_name))
