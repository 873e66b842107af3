"""Which dependencies (the database, the channel layer, the disk) fail right now, logged once per outage, not per call.

Inference never waits on them: the /v2 authenticator falls back to verdicts it saw recently, the reconciler backs
off, the metrics stream skips a beat. Each of those reports failures and successes to one `Outage`, which logs a
warning when the dependency goes away and an info line when it is back, and says how long it has been down.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import time
from collections.abc import Callable, Iterator

from django.db import InterfaceError, OperationalError
from redis.exceptions import TimeoutError as RedisReadTimeout

from engine.api import Unavailable

logger = logging.getLogger("console.outages")

# what a lost database connection raises (a wrong query raises other DatabaseErrors, which are bugs, not outages)
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError)


# what a write says when the disk (or the process's file size limit, or a quota) has no room left
STORAGE_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def is_storage_full(exc: BaseException) -> bool:
    """Whether `exc` is a write that found no room left."""
    return isinstance(exc, OSError) and exc.errno in STORAGE_FULL_ERRNOS


def is_idle_wait(exc: BaseException) -> bool:
    """Whether a channel-layer receive merely waited longer than its socket allows (Redis is up, nothing came)."""
    return isinstance(exc, RedisReadTimeout)


# PostgreSQL's deadlock_detected and serialization_failure: the transaction lost a race, the database is up
CONFLICT_SQLSTATES = frozenset({"40P01", "40001"})


def is_transaction_conflict(exc: BaseException) -> bool:
    """Whether `exc` is a transaction the database rolled back for a conflict with another: worth retrying now."""
    return getattr(exc.__cause__, "sqlstate", None) in CONFLICT_SQLSTATES


def is_database_outage(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached (or is locked), as opposed to a bad query."""
    return isinstance(exc, DATABASE_UNAVAILABLE)


@contextlib.contextmanager
def database_needed(action: str) -> Iterator[None]:
    """Raise the engine's Unavailable (503, gRPC UNAVAILABLE) naming `action` when the database is down inside."""
    try:
        yield
    except DATABASE_UNAVAILABLE:
        raise Unavailable(f"cannot {action}: the database is unavailable; retry shortly") from None


class Outage:
    """One dependency's state as its callers see it: `failed()` and `recovered()` after each attempt."""

    def __init__(self, dependency: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.dependency = dependency
        self.clock = clock
        self.since: float | None = None  # when the current outage began; None while it answers
        self.failures = 0  # consecutive failed attempts

    @property
    def down(self) -> bool:
        return self.since is not None

    def down_for(self) -> float:
        """Seconds since the dependency stopped answering (0 while it answers)."""
        return 0.0 if self.since is None else self.clock() - self.since

    def failed(self, exc: BaseException) -> None:
        """An attempt failed: the first failure of an outage is logged, the rest only counted."""
        self.failures += 1
        if self.since is None:
            self.since = self.clock()
            logger.warning("%s is unavailable (%s: %s); serving goes on", self.dependency, type(exc).__name__, exc)

    def recovered(self) -> None:
        """An attempt succeeded: the end of an outage is logged with its length."""
        if self.since is not None:
            logger.info("%s is back after %.1f s (%d failed attempts)", self.dependency, self.down_for(), self.failures)
        self.since = None
        self.failures = 0
