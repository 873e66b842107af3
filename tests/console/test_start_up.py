"""Start-up that is safe in parallel: the settings that say who migrates and seeds, the advisory lock, the wait for
migrations another process applies, and the secret key replicas must share."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from django.db import connection
from django.db.utils import ConnectionHandler

from console.config import read_settings
from console.env import EnvError
from console.hosting.startup import MigrationsMissing, start_up_lock, unapplied_migrations, wait_for_migrations

SECRET = "a-secret-key-shared-by-every-replica-0123456789"


def test_it_migrates_and_seeds_unless_told_not_to():
    assert read_settings({}).migrate and read_settings({}).seed_demo
    told = read_settings({"INFERA_MIGRATE": "false", "INFERA_SEED_DEMO": "0"})
    assert not told.migrate and not told.seed_demo


def test_it_refuses_a_word_that_is_not_a_boolean():
    with pytest.raises(EnvError, match="INFERA_SEED_DEMO"):
        read_settings({"INFERA_SEED_DEMO": "sometimes"})


def test_it_requires_one_secret_key_for_replicas_sharing_redis():
    with pytest.raises(EnvError, match="INFERA_SECRET_KEY .* must be set when REDIS_URL is"):
        read_settings({"REDIS_URL": "redis://127.0.0.1:6379/0"})
    shared = read_settings({"REDIS_URL": "redis://127.0.0.1:6379/0", "INFERA_SECRET_KEY": SECRET})
    assert shared.secret_key == SECRET


def test_it_keeps_the_generated_secret_key_for_one_process():
    assert read_settings({}).secret_key is None  # kept in var/secret_key, as before


def empty_database(tmp_path: Path):
    return ConnectionHandler({"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "e.db")}})[
        "default"
    ]


@pytest.mark.django_db
def test_it_finds_nothing_to_wait_for_on_a_migrated_database():
    assert unapplied_migrations(connection) == []
    wait_for_migrations(connection, timeout=0)


@pytest.mark.django_db
def test_it_gives_up_waiting_for_migrations_nobody_applies(tmp_path: Path):
    empty = empty_database(tmp_path)
    told: list[list[str]] = []
    try:
        with pytest.raises(MigrationsMissing, match="INFERA_MIGRATE=false and .* migrations are still not applied"):
            wait_for_migrations(empty, timeout=0.2, poll=0.05, on_wait=told.append)
    finally:
        empty.close()
    assert len(told) == 1 and "registry.0001_initial" in told[0]


@pytest.mark.django_db(transaction=True)
def test_it_lets_one_process_at_a_time_through_the_start_up_steps():
    if connection.vendor != "postgresql":
        pytest.skip("the advisory lock is PostgreSQL's (SQLite serves one process)")
    inside, release, waited, second_in = threading.Event(), threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with start_up_lock():
            inside.set()
            release.wait(30)

    def second() -> None:
        with start_up_lock(on_wait=waited.set):
            second_in.set()

    holder = threading.Thread(target=first)
    holder.start()
    assert inside.wait(30)
    follower = threading.Thread(target=second)
    follower.start()
    assert waited.wait(30)  # it found the lock taken and waits
    assert not second_in.is_set()
    release.set()
    holder.join(30)
    follower.join(30)
    assert second_in.is_set()
