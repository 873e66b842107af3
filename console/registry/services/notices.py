"""Change notices: after a change commits, every reconciler (every replica on a Redis layer) wakes."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger("console.registry")


GROUP = "registry"


CHANGED = "registry.changed"


def notify_changed(name: str) -> None:
    """After the current transaction commits, wake every reconciler (every replica on a Redis channel layer)."""

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(GROUP, {"type": CHANGED, "model": name})
        except Exception as exc:  # the periodic pass heals a lost message; the change itself is committed
            logger.warning("could not announce the change of model '%s' (%s: %s)", name, type(exc).__name__, exc)

    transaction.on_commit(send)
