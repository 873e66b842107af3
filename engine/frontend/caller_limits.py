"""How many requests one caller may have in flight at once, on `/v2` and on gRPC.

A caller is a token (or a user, or an anonymous peer address): `caller_key` names it, `CallerLimits.enter` counts
one more of its requests in flight or refuses it with 429 (RESOURCE_EXHAUSTED on gRPC), naming the limit, and
`leave` counts it out. The hot path is a dict lookup and an increment; nothing is kept for callers with nothing in
flight.
"""

from __future__ import annotations

from collections.abc import Hashable

from engine.errors import InferaError
from engine.serving.admission import Principal
from engine.types import current_caller

SETTING = "INFERA_MAX_CONCURRENT_PER_CALLER"


class TooManyInFlight(InferaError):
    """A caller already has as many requests in flight as it may (HTTP 429, gRPC RESOURCE_EXHAUSTED)."""

    status = 429


def caller_key(principal: Principal, peer: str | None) -> Hashable:
    """Who is counted: the token, else the user, else the anonymous caller's address (its host, not its port)."""
    if principal.token_id is not None:
        return ("token", principal.token_id)
    if principal.user_id is not None:
        return ("user", principal.user_id)
    return ("anonymous", peer or "")


class CallerLimits:
    """Requests in flight per caller, each caller held to `limit` (0: no limit)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._in_flight: dict[Hashable, int] = {}

    def enter(self, key: Hashable) -> None:
        """Count one more request of `key` in flight; TooManyInFlight when it already has `limit`. The running task
        serves `key` from here on (engine.types.current_caller: a caller's open sequences are counted by it)."""
        count = self._in_flight.get(key, 0)
        if count >= self.limit > 0:
            raise TooManyInFlight(
                f"too many requests in flight for this caller: at most {self.limit} at once ({SETTING})"
            )
        self._in_flight[key] = count + 1
        current_caller.set(key)

    def leave(self, key: Hashable) -> None:
        """Count one request of `key` out (it answered, failed or was cancelled)."""
        count = self._in_flight.get(key, 0) - 1
        if count > 0:
            self._in_flight[key] = count
        else:
            self._in_flight.pop(key, None)

    def in_flight(self, key: Hashable) -> int:
        return self._in_flight.get(key, 0)
