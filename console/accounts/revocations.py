"""Credential changes reach every /v2 token cache at once: revoked or changed tokens and users are announced.

A token revoked (or edited, or deleted), a user deactivated, deleted or given another role: the change is announced
on the channel layer after its transaction commits, and each serving process's RevocationListener drops the cached
verdicts it holds on that token or user. With the in-memory layer that is this process; with Redis, every replica.
The cache's own few-second expiry remains the backstop for a change made behind Django's back (raw SQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.dispatch import receiver

from console.accounts.models import ApiToken
from console.layer_tasks import end_task
from console.outages import Outage, is_idle_wait

logger = logging.getLogger("console.accounts.revocations")

GROUP = "accounts.credentials"
RETRY_SECONDS = 1.0  # between attempts to rejoin the group while the channel layer is down
# Redis forgets a group member after a day (channels_redis' group_expiry): membership is renewed well before
RENEW_SECONDS = 3600.0
CHANGED = "credentials.changed"


def announce(*, token_id: int | None = None, user_id: int | None = None) -> None:
    """After the current transaction commits, tell every listener that a token or a user's credentials changed."""

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(GROUP, {"type": CHANGED, "token": token_id, "user": user_id})
        except Exception as exc:  # the cache's expiry is the backstop; the change itself is committed
            logger.warning("could not announce a credential change (%s: %s)", type(exc).__name__, exc)

    transaction.on_commit(send)


@receiver([post_save, post_delete], sender=ApiToken, dispatch_uid="accounts.token_changed")
def token_changed(sender: Any, instance: ApiToken, created: bool = False, **_: Any) -> None:
    if not created:
        announce(token_id=instance.pk)


def _user_changed(sender: Any, instance: Any, created: bool = False, **_: Any) -> None:
    if not created:
        announce(user_id=instance.pk)


def _roles_changed(sender: Any, instance: Any, action: str, **_: Any) -> None:
    if action in ("post_add", "post_remove", "post_clear") and isinstance(instance, get_user_model()):
        announce(user_id=instance.pk)


def connect_user_signals() -> None:
    """Receivers on the user model (called once the app registry is ready)."""
    user = get_user_model()
    post_save.connect(_user_changed, sender=user, dispatch_uid="accounts.user_changed")
    post_delete.connect(_user_changed, sender=user, dispatch_uid="accounts.user_deleted")
    m2m_changed.connect(_roles_changed, sender=user.groups.through, dispatch_uid="accounts.roles_changed")


class RevocationListener:
    """Drops a TokenCache's verdicts as credential changes are announced; `seen` counts the messages handled."""

    def __init__(self, cache: Any, renew_seconds: float = RENEW_SECONDS) -> None:
        self.cache = cache
        self.renew_seconds = renew_seconds
        self.seen = 0
        self.layer_outage = Outage("the channel layer (credential changes)")
        self._handled = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._renewal: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Join the group and listen in the background (returns once joined, so no change is missed after it)."""
        layer = get_channel_layer()
        if layer is None or self._task is not None:
            return
        channel = await layer.new_channel()  # the default prefix: see console/monitoring/cluster.py
        joined = await self._join(layer, channel)
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._listen(layer, channel, joined), name="credential-listener")
        self._renewal = loop.create_task(self._renew(layer, channel), name="credential-group-renewal")

    async def stop(self) -> None:
        for task in (self._renewal, self._task):
            await end_task(task)
        self._task = self._renewal = None

    async def _renew(self, layer: Any, channel: str) -> None:
        """Join the group again every `renew_seconds`, so a replica running for days still hears every change."""
        while True:
            await asyncio.sleep(self.renew_seconds)
            await self._join(layer, channel)

    async def wait_for(self, count: int) -> None:
        """Until `count` messages have been handled (tests and start-up checks)."""
        async with self._handled:
            await self._handled.wait_for(lambda: self.seen >= count)

    async def _join(self, layer: Any, channel: str) -> bool:
        """Join the group; False (logged once per outage) while the channel layer is unreachable."""
        try:
            await layer.group_add(GROUP, channel)
        except Exception as exc:  # Redis down: start anyway, the cache's short expiry is the backstop
            self.layer_outage.failed(exc)
            return False
        self.layer_outage.recovered()
        return True

    async def _listen(self, layer: Any, channel: str, joined: bool) -> None:
        try:
            while True:
                if not joined:
                    await asyncio.sleep(RETRY_SECONDS)
                    joined = await self._join(layer, channel)
                    continue
                try:
                    message = await layer.receive(channel)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if is_idle_wait(exc):
                        continue
                    self.layer_outage.failed(exc)
                    joined = False
                    continue
                if message.get("type") != CHANGED:
                    continue
                if message.get("token") is not None:
                    self.cache.forget_token(message["token"])
                if message.get("user") is not None:
                    self.cache.forget_user(message["user"])
                async with self._handled:
                    self.seen += 1
                    self._handled.notify_all()
        finally:
            with contextlib.suppress(Exception):
                await layer.group_discard(GROUP, channel)
