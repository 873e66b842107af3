"""What `serve` does once per database before serving, made safe for replicas starting at the same moment.

On PostgreSQL the steps run under one advisory lock (`start_up_lock`), so of several replicas starting together one
migrates, makes the first admin and seeds, and the others find it done. With INFERA_MIGRATE=false another process (a
Kubernetes Job) owns the migrations and `serve` waits until they are applied (`wait_for_migrations`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.executor import MigrationExecutor

# pg_advisory_lock's key for the start-up steps: "infera" in ASCII, a number no other application is likely to use
START_UP_LOCK = 0x696E66657261
MIGRATION_WAIT_SECONDS = 600.0


class MigrationsMissing(RuntimeError):
    """INFERA_MIGRATE=false and the migrations were not applied in time."""


@contextlib.contextmanager
def start_up_lock(on_wait: Callable[[], None] = lambda: None, alias: str = "default") -> Iterator[None]:
    """Hold PostgreSQL's advisory lock for the block (on a connection of its own); SQLite needs none (one process).

    `on_wait` is called once when another process holds the lock, before waiting for it.
    """
    if connections[alias].vendor != "postgresql":
        yield
        return
    locker = connections.create_connection(alias)  # the lock lives as long as this session, whatever migrate does
    try:
        with locker.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [START_UP_LOCK])
            if not cursor.fetchone()[0]:
                on_wait()
                cursor.execute("SELECT pg_advisory_lock(%s)", [START_UP_LOCK])
        try:
            yield
        finally:
            with locker.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [START_UP_LOCK])
    finally:
        locker.close()


def unapplied_migrations(connection: BaseDatabaseWrapper) -> list[str]:
    """The migrations this code has that the database has not applied, as `app.name`."""
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{migration.app_label}.{migration.name}" for migration, _backwards in plan]


def wait_for_migrations(
    connection: BaseDatabaseWrapper | None = None,
    timeout: float = MIGRATION_WAIT_SECONDS,
    poll: float = 2.0,
    on_wait: Callable[[list[str]], None] = lambda missing: None,
) -> None:
    """Until every migration is applied by another process; MigrationsMissing after `timeout` seconds."""
    connection = connection or connections["default"]
    deadline = time.monotonic() + timeout
    told = False
    while True:
        missing = unapplied_migrations(connection)
        if not missing:
            return
        if time.monotonic() >= deadline:
            raise MigrationsMissing(
                f"INFERA_MIGRATE=false and {len(missing)} migrations are still not applied after {timeout:.0f} s "
                f"(first: {missing[0]}); run `python manage.py migrate` (the migration Job) or set INFERA_MIGRATE=true"
            )
        if not told:
            on_wait(missing)
            told = True
        connection.close()  # a fresh look next time
        time.sleep(poll)
