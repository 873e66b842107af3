"""Budget counters on Redis, shared by every replica: a reservation on one is seen by the others at once.

Tokens per minute: INCRBY and EXPIRE on the minute's key in one MULTI, GET of the previous minute's. Streams: a
sorted set per owner, a lease's score its expiry; one Lua script drops the expired, counts and adds, so two replicas
never both take the last slot.
While Redis does not answer, each call goes to this process's `LocalCounters` instead (budgets then hold per
replica), the outage is logged once and Redis is tried again every `retry_seconds`: inference never fails because
Redis did.
"""

from __future__ import annotations

import logging
import time

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from engine.llm.budgets import LocalCounters

logger = logging.getLogger("engine.llm.budgets")

TAKE_LEASE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""
SOCKET_TIMEOUT_SECONDS = 0.5


class RedisCounters:
    """`Counters` on one Redis (REDIS_URL), this process's memory while it is down."""

    def __init__(self, url: str, retry_seconds: float = 1.0) -> None:
        self.redis = aioredis.from_url(
            url, socket_timeout=SOCKET_TIMEOUT_SECONDS, socket_connect_timeout=SOCKET_TIMEOUT_SECONDS
        )
        self.take = self.redis.register_script(TAKE_LEASE)
        self.local = LocalCounters()
        self.retry_seconds = retry_seconds
        self._retry_at = 0.0
        self._down = False

    def _usable(self) -> bool:
        return not self._down or time.monotonic() >= self._retry_at

    def _failed(self, exc: Exception) -> None:
        if not self._down:
            name = type(exc).__name__
            logger.warning("Redis (token budgets) does not answer (%s: %s): budgets hold per replica", name, exc)
        self._down = True
        self._retry_at = time.monotonic() + self.retry_seconds

    def _recovered(self) -> None:
        if self._down:
            logger.warning("Redis (token budgets) answers again")
        self._down = False

    async def add_tokens(self, key: str, amount: int, expire_seconds: int) -> int:
        if self._usable():
            try:
                async with self.redis.pipeline(transaction=True) as pipe:
                    count, _ = await pipe.incrby(key, amount).expire(key, expire_seconds).execute()
                self._recovered()
                return int(count)
            except (RedisError, OSError) as exc:
                self._failed(exc)
        return await self.local.add_tokens(key, amount, expire_seconds)

    async def get_tokens(self, key: str) -> int:
        if self._usable():
            try:
                count = await self.redis.get(key)
                self._recovered()
                return int(count or 0)
            except (RedisError, OSError) as exc:
                self._failed(exc)
        return await self.local.get_tokens(key)

    async def take_lease(self, key: str, lease: str, limit: int, now: float, lease_seconds: float) -> bool:
        if self._usable():
            try:
                taken = await self.take(keys=[key], args=[now, limit, now + lease_seconds, lease, int(lease_seconds)])
                self._recovered()
                return bool(taken)
            except (RedisError, OSError) as exc:
                self._failed(exc)
        return await self.local.take_lease(key, lease, limit, now, lease_seconds)

    async def give_back_lease(self, key: str, lease: str) -> None:
        await self.local.give_back_lease(key, lease)
        if self._usable():
            try:
                await self.redis.zrem(key, lease)
                self._recovered()
            except (RedisError, OSError) as exc:
                self._failed(exc)

    async def close(self) -> None:
        await self.redis.aclose()
