"""The cache replicas share on Redis (sign-in lockout, API rate): counts seen by every replica, and this process's
memory while Redis is down, so that nothing fails with it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.cache import caches

from console.accounts import login_throttle
from console.shared_cache import SharedCache, cache_settings
from deploy.processes import RedisServer

REPO_ROOT = Path(__file__).resolve().parents[2]


def replica_cache(server: RedisServer) -> SharedCache:
    """The cache one replica builds from REDIS_URL."""
    params = cache_settings(server.url)["default"]
    return SharedCache(params["LOCATION"], params)


def test_it_keeps_the_cache_in_memory_without_redis():
    assert cache_settings(None)["default"]["BACKEND"] == "django.core.cache.backends.locmem.LocMemCache"


def in_a_worker(var_dir: Path, code: str) -> str:
    """Run `code` in a fresh process set up as one of two workers of a port (no Redis), its output."""
    env = {
        **os.environ,
        "INFERA_WORKERS": "2",
        "INFERA_VAR_DIR": str(var_dir),
        "INFERA_LOGIN_MAX_FAILURES": "2",
        "DJANGO_SETTINGS_MODULE": "console.settings",
    }
    env.pop("REDIS_URL", None)
    setup = "import django; django.setup(); from console.accounts import login_throttle as t; "
    done = subprocess.run(
        [sys.executable, "-c", setup + code], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_it_shares_a_folder_between_the_workers_of_one_port_without_redis(tmp_path: Path):
    assert cache_settings(None, workers=2, var_dir=tmp_path)["default"]["LOCATION"] == str(tmp_path / "cache")
    in_a_worker(tmp_path, "t.record_failure('mallory', '10.0.0.9'); t.record_failure('mallory', '10.0.0.9')")
    # another worker process sees the lock
    assert in_a_worker(tmp_path, "print(t.is_locked('mallory', '10.0.0.9'), t.is_locked('mallory', '10.0.0.10'))") == (
        "True False"
    )


def test_it_counts_once_for_every_replica(private_redis: RedisServer):
    first, second = replica_cache(private_redis), replica_cache(private_redis)
    assert first.add("failures", 1, timeout=60)
    assert not second.add("failures", 1, timeout=60)  # the other replica sees the count
    assert second.incr("failures") == 2
    assert first.get("failures") == 2
    first.delete("failures")


def test_it_locks_a_sign_in_on_every_replica(private_redis: RedisServer, settings):
    settings.CACHES = cache_settings(private_redis.url)
    settings.INFERA = settings.INFERA.replace(login_max_failures=2)
    first = caches["default"]
    for _ in range(2):
        login_throttle.record_failure("mallory", "10.0.0.9")  # failures counted by one replica
    settings.CACHES = cache_settings(private_redis.url)  # another replica: a cache of its own on the same Redis
    assert caches["default"] is not first
    assert login_throttle.is_locked("mallory", "10.0.0.9")
    assert not login_throttle.is_locked("mallory", "10.0.0.10")
    caches["default"].clear()


def test_it_falls_back_to_memory_while_redis_is_down(private_redis: RedisServer, caplog: pytest.LogCaptureFixture):
    cache, other = replica_cache(private_redis), replica_cache(private_redis)
    cache.retry_seconds = 0  # each call tries Redis first (refused at once while it is down)
    cache.set("seen", "before", timeout=60)
    private_redis.stop()
    try:
        with caplog.at_level(logging.WARNING, logger="console.outages"):
            assert cache.get("seen") is None  # not in this process's memory: a miss, not an error
            assert cache.add("failures", 1, timeout=60)
            assert cache.incr("failures") == 2
            assert cache.get("failures") == 2
        warnings = [r for r in caplog.records if "the shared cache" in r.getMessage()]
        assert len(warnings) == 1  # once per outage, not per call
    finally:
        private_redis.start()
    other.set("seen", "after", timeout=60)
    assert cache.get("seen") == "after"  # Redis again: what another replica wrote
    assert not cache.outage.down
