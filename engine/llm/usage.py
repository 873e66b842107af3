"""What callers used (prompt, completion and cached tokens), counted for /metrics and a minute at a time for charts.

Every /v1 completion and embedding and every generate request that ends (answered, failed, the client gone) is
counted once here, through its budget admission's `settle` (engine/llm/budgets.py), in this process's memory: no
I/O on the request's path. `/metrics` carries the running totals by user (`infera_llm_usage_tokens_total{user,
kind}`) and by API token (`infera_llm_token_usage_tokens_total{token, user, kind}`, the token's id); the labels are
the console's accounts and token ids (an anonymous caller is "anonymous"), so they are as many as the accounts.
`take_minutes()` hands over (and forgets) each (minute, user, token)'s counts since the last call, for a writer off
the request path: the console's UsageRecorder adds them to its database, where every replica's usage adds up. Minutes
nobody takes are kept for KEEP_MINUTES, then dropped (an engine without a console does not grow).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric

USAGE_KINDS = ("prompt", "completion", "cached")
KEEP_MINUTES = 60


@dataclass(frozen=True, slots=True)
class Usage:
    """What one request used (`cached` is the part of the prompt read from the prefix cache)."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0

    @property
    def total(self) -> int:
        return self.prompt + self.completion


@dataclass(frozen=True, slots=True)
class UsageMinute:
    """One caller's tokens in one minute (`minute`: whole minutes since the epoch, UTC)."""

    minute: int
    user: str  # the caller's name as counted
    user_id: int | None  # None: an anonymous caller
    token_id: int | None  # None: a signed-in session or no token
    prompt: int = 0
    completion: int = 0
    cached: int = 0


class UsageLedger:
    """Usage counted per user, per API token and per minute; a prometheus_client collector."""

    def __init__(self, clock: Callable[[], float] = time.time, keep_minutes: int = KEEP_MINUTES) -> None:
        self.clock = clock
        self.keep_minutes = keep_minutes
        self.usage: Counter[tuple[str, str]] = Counter()  # (user, kind) -> tokens
        self.token_usage: Counter[tuple[int, str, str]] = Counter()  # (token id, its user, kind) -> tokens
        self._minutes: dict[tuple[int, str, int | None, int | None], list[int]] = {}
        self._latest = 0

    def count(self, user: str, usage: Usage, token: int | None = None, user_id: int | None = None) -> None:
        """Add one request's usage (nothing when it used nothing)."""
        amounts = (usage.prompt, usage.completion, usage.cached)
        if not any(amounts):
            return
        for kind, tokens in zip(USAGE_KINDS, amounts, strict=True):
            if tokens:
                self.usage[(user, kind)] += tokens
                if token is not None:
                    self.token_usage[(token, user, kind)] += tokens
        minute = int(self.clock() // 60)
        if minute > self._latest:
            self._latest = minute
            self._forget_before(minute - self.keep_minutes + 1)
        bucket = self._minutes.setdefault((minute, user, user_id, token), [0, 0, 0])
        for index, tokens in enumerate(amounts):
            bucket[index] += tokens

    def take_minutes(self) -> list[UsageMinute]:
        """Every (minute, caller)'s counts since the last call, oldest first; they are forgotten here."""
        taken, self._minutes = self._minutes, {}
        return [UsageMinute(*key, *counts) for key, counts in sorted(taken.items(), key=_by_minute)]

    def _forget_before(self, minute: int) -> None:
        for key in [key for key in self._minutes if key[0] < minute]:
            del self._minutes[key]

    def collect(self) -> Iterable[Metric]:
        """`infera_llm_usage_tokens_total{user, kind}` and `infera_llm_token_usage_tokens_total{token, user, kind}`."""
        family = Metric("infera_llm_usage_tokens", "Tokens used by each user, by kind.", "counter")
        for (user, kind), tokens in sorted(self.usage.items()):
            family.add_sample("infera_llm_usage_tokens_total", {"user": user, "kind": kind}, tokens)
        yield family
        family = Metric("infera_llm_token_usage_tokens", "Tokens used with each API token (its id).", "counter")
        for (token, user, kind), tokens in sorted(self.token_usage.items()):
            labels = {"token": str(token), "user": user, "kind": kind}
            family.add_sample("infera_llm_token_usage_tokens_total", labels, tokens)
        yield family


def _by_minute(item: tuple[tuple[int, str, int | None, int | None], list[int]]) -> tuple[int, str, int, int]:
    (minute, user, user_id, token), _ = item
    return minute, user, user_id or 0, token or 0
