"""Token budgets per API token and per user, checked and reserved before a request's work is queued.

A `Budget` (plain data the console puts on the caller's Principal) names its owner ("user:3", "token:7") and up to
three limits, each None when unset: tokens per minute (prompt + completion, all choices), concurrent streams
(requests in flight, streamed or not) and a max_tokens ceiling.

`BudgetGate.admit(principal, max_tokens)` takes every budget of the caller in turn (the user's, then the token's):
- tokens per minute: a sliding window over the wall clock's minutes, as rate limiters estimate it: the tokens of
  this minute so far plus the previous minute's, weighted by the share of it still inside the last 60 seconds (no
  cliff at a minute's turn). The request's `max_tokens` is reserved at once (INCRBY on the minute's key); a request
  is admitted while that estimate, before it, is below the limit, so the last request admitted may run past it by
  at most its own max_tokens. `Admission.settle(usage)` then replaces the reservation with what the request used
  (prompt + completion tokens).
- concurrent streams: a lease (a member of the owner's set, expiring after `lease_seconds` in case a replica dies
  holding it) taken when fewer than the limit are held, given back by `settle`.
A refusal undoes what the earlier budgets reserved and raises `BudgetExceeded` (429) with the seconds to wait
(`Retry-After`): until the estimate falls below the limit, or 1 for streams. `settle` runs once, however the
request ends.

The counters are `LocalCounters` (this process: one replica) or `RedisCounters` (engine/llm/budget_redis.py: every
replica on one Redis sees each other's reservations at once); both answer the same three calls, atomically. A
caller without budgets is admitted with nothing reserved, so `settle` still counts what every request used (prompt,
completion, cached tokens) in the gate's `ledger` (engine/llm/usage.py: /metrics by user and token, minute buckets).
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from engine.errors import InferaError
from engine.llm.usage import Usage, UsageLedger

if TYPE_CHECKING:
    from engine.serving.admission import Principal

WINDOW_SECONDS = 60
LEASE_SECONDS = 900.0  # a stream lease outlives any request (a replica that dies keeps its leases this long)
STREAM_RETRY_SECONDS = 1


@dataclass(frozen=True, slots=True)
class Budget:
    """One owner's limits (None: no limit of that kind)."""

    owner: str  # "user:<id>" or "token:<id>"
    tokens_per_minute: int | None = None
    concurrent_streams: int | None = None
    max_tokens: int | None = None

    @property
    def limits_anything(self) -> bool:
        return any(v is not None for v in (self.tokens_per_minute, self.concurrent_streams, self.max_tokens))


class BudgetExceeded(InferaError):
    """A budget refuses the request now (429); `retry_after` whole seconds until it may pass."""

    status = 429

    def __init__(self, message: str, retry_after: int, kind: str) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.kind = kind  # "tokens" or "requests", as OpenAI's rate-limit errors name them


class Counters(Protocol):
    """Where reservations are counted: atomic per call."""

    async def add_tokens(self, key: str, amount: int, expire_seconds: int) -> int:
        """Add `amount` (may be negative) to the window's count; its new value."""

    async def get_tokens(self, key: str) -> int:
        """A window's count (0 when none or expired)."""

    async def take_lease(self, key: str, lease: str, limit: int, now: float, lease_seconds: float) -> bool:
        """Hold `lease` if fewer than `limit` unexpired leases are held; False otherwise."""

    async def give_back_lease(self, key: str, lease: str) -> None:
        """Drop `lease` (held or not)."""


class LocalCounters:
    """Counters in this process's memory (one replica's budgets)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._tokens: dict[str, tuple[int, float]] = {}  # key -> (count, expires at)
        self._leases: dict[str, dict[str, float]] = {}  # key -> lease -> expires at

    async def add_tokens(self, key: str, amount: int, expire_seconds: int) -> int:
        now = self.clock()
        count, expires = self._tokens.get(key, (0, 0.0))
        if expires <= now:
            count = 0
        for stale in [k for k, (_, at) in self._tokens.items() if at <= now]:
            del self._tokens[stale]
        self._tokens[key] = (count + amount, now + expire_seconds)
        return count + amount

    async def get_tokens(self, key: str) -> int:
        count, expires = self._tokens.get(key, (0, 0.0))
        return count if expires > self.clock() else 0

    async def take_lease(self, key: str, lease: str, limit: int, now: float, lease_seconds: float) -> bool:
        held = {k: at for k, at in self._leases.get(key, {}).items() if at > now}
        if len(held) >= limit:
            self._leases[key] = held
            return False
        held[lease] = now + lease_seconds
        self._leases[key] = held
        return True

    async def give_back_lease(self, key: str, lease: str) -> None:
        held = self._leases.get(key)
        if held is not None:
            held.pop(lease, None)
            if not held:
                del self._leases[key]


@dataclass(eq=False)
class Admission:
    """What a request reserved; `settle` once when it ends (answered, failed, cancelled)."""

    gate: BudgetGate
    user: str
    token: int | None = None  # the API token it came with (None: a session or anonymous)
    user_id: int | None = None  # None: anonymous
    reserved: list[tuple[str, int]] = field(default_factory=list)  # (window key, tokens reserved)
    leases: list[tuple[str, str]] = field(default_factory=list)  # (lease set key, lease)
    settled: bool = False

    async def settle(self, usage: Usage | None) -> None:
        """Replace the reservations by `usage` (None: nothing was used) and give back the stream leases."""
        if self.settled:
            return
        self.settled = True
        used = usage.total if usage is not None else 0
        counters = self.gate.counters
        for key, amount in self.reserved:
            if used != amount:
                await counters.add_tokens(key, used - amount, WINDOW_SECONDS * 2)
        for key, lease in self.leases:
            await counters.give_back_lease(key, lease)
        if usage is not None:
            self.gate.ledger.count(self.user, usage, self.token, self.user_id)

    def settle_soon(self, usage: Usage | None) -> None:
        """`settle` from a synchronous callback (a client gone): run on the loop, kept until done."""
        if self.settled:
            return
        task = asyncio.ensure_future(self.settle(usage))
        self.gate.pending.add(task)
        task.add_done_callback(self.gate.pending.discard)


class BudgetGate:
    """Check-and-reserve against the caller's budgets; what callers used in `ledger`."""

    def __init__(
        self,
        counters: Counters | None = None,
        *,
        prefix: str = "infera:budget",
        clock: Callable[[], float] = time.time,
        lease_seconds: float = LEASE_SECONDS,
    ) -> None:
        self.counters: Counters = counters if counters is not None else LocalCounters(clock)
        self.prefix = prefix
        self.clock = clock
        self.lease_seconds = lease_seconds
        self.ledger = UsageLedger(clock)  # usage by user, token and minute: /metrics and the console's chart
        self.pending: set[asyncio.Future] = set()

    @staticmethod
    def ceiling(principal: Principal) -> int | None:
        """The lowest max_tokens ceiling of the caller's budgets, None when none sets one."""
        ceilings = [b.max_tokens for b in principal.budgets if b.max_tokens is not None]
        return min(ceilings) if ceilings else None

    async def admit(self, principal: Principal, max_tokens: int) -> Admission:
        """Reserve `max_tokens` and a stream against each budget of the caller; BudgetExceeded when one refuses."""
        admission = Admission(self, principal.name, principal.token_id, principal.user_id)
        try:
            for budget in principal.budgets:
                await self._reserve(budget, max_tokens, admission)
        except BudgetExceeded:
            await admission.settle(None)
            raise
        return admission

    async def _reserve(self, budget: Budget, max_tokens: int, admission: Admission) -> None:
        now = self.clock()
        if budget.tokens_per_minute is not None:
            window = int(now // WINDOW_SECONDS)
            key = f"{self.prefix}:tpm:{budget.owner}"
            previous = await self.counters.get_tokens(f"{key}:{window - 1}")
            count = await self.counters.add_tokens(f"{key}:{window}", max_tokens, WINDOW_SECONDS * 2)
            admission.reserved.append((f"{key}:{window}", max_tokens))
            share = now / WINDOW_SECONDS - window  # of this minute gone
            used = previous * (1 - share) + count - max_tokens
            if used >= budget.tokens_per_minute:
                wait = _seconds_below(budget.tokens_per_minute, previous, count - max_tokens, share)
                raise BudgetExceeded(
                    f"rate limit reached for {_owner_words(budget.owner)}: {budget.tokens_per_minute} tokens per "
                    f"minute, used {used:.0f} in the last minute; try again in {wait} s",
                    wait,
                    "tokens",
                )
        if budget.concurrent_streams is not None:
            key = f"{self.prefix}:streams:{budget.owner}"
            lease = uuid.uuid4().hex
            if not await self.counters.take_lease(key, lease, budget.concurrent_streams, now, self.lease_seconds):
                raise BudgetExceeded(
                    f"rate limit reached for {_owner_words(budget.owner)}: at most {budget.concurrent_streams} "
                    "concurrent requests; try again when one ends",
                    STREAM_RETRY_SECONDS,
                    "requests",
                )
            admission.leases.append((key, lease))


def _seconds_below(limit: int, previous: int, current: int, share: float) -> int:
    """Whole seconds until the sliding estimate falls below `limit` if nothing more is used."""
    if current < limit and previous > 0:  # within this minute, as the previous one slides out
        gone = 1 - (limit - current) / previous
        return max(1, math.ceil((gone - share) * WINDOW_SECONDS - 1e-9))
    gone_next = 1 - limit / current if current > 0 else 0.0  # into the next minute, as this one slides out
    return max(1, math.ceil((1 - share + gone_next) * WINDOW_SECONDS - 1e-9))


def _owner_words(owner: str) -> str:
    kind, _, ident = owner.partition(":")
    return f"this API token (id {ident})" if kind == "token" else f"this user (id {ident})"
