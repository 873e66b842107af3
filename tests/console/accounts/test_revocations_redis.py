"""Revocations through Redis, as replicas hear them: the listener stays in its group past channels_redis' group
expiry (a day), so a replica that has run for days still drops a revoked token's verdict at once."""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis
from channels.layers import get_channel_layer

from console.accounts.inference_auth import TokenCache
from console.accounts.revocations import CHANGED, GROUP, RevocationListener
from deploy.processes import RedisServer


async def test_it_still_hears_revocations_after_redis_would_have_forgotten_it(settings, private_redis: RedisServer):
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [private_redis.url]}}
    }
    layer = get_channel_layer()
    listener = RevocationListener(TokenCache(ttl=3600), renew_seconds=0.05)
    await listener.start()
    store = aioredis.from_url(private_redis.url)
    try:
        key = layer._group_key(GROUP)
        # time passing: Redis holds the membership as made at the epoch, long past the group expiry
        await store.zadd(key, dict.fromkeys(await store.zrange(key, 0, -1), 0))
        deadline = time.monotonic() + 10
        while min(score for _, score in await store.zrange(key, 0, -1, withscores=True)) == 0:
            assert time.monotonic() < deadline, "the listener never renewed its group membership"
            await asyncio.sleep(0.01)
        await layer.group_send(GROUP, {"type": CHANGED, "token": 1, "user": None})
        await asyncio.wait_for(listener.wait_for(1), 10)
    finally:
        await listener.stop()
        await store.aclose()
        await layer.flush()
