"""Fixtures of the console monitoring tests: users by role, and a sampler over stand-in served versions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model

from console.accounts.roles import set_role
from console.monitoring import live
from engine.monitoring.sampler import MetricsSampler
from tests.engine.monitoring.stand_ins import FIXED_DEVICES, FakeClock, Served, ServedVersions


@pytest.fixture
def in_memory_layer(settings) -> None:
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


@pytest.fixture
def user_with_role():
    """`await user_with_role("viewer")`: a new user holding that role (None: no role at all)."""

    @database_sync_to_async
    def make(role: str | None, username: str | None = None):
        user = get_user_model().objects.create_user(username or f"user-{role}", password="pw-for-tests-123")
        if role is not None:
            set_role(user, role)
        return user

    return make


class SampledServer:
    """A sampler over stand-in versions with a hand clock; `tick()` samples one second later."""

    def __init__(self, *served: Served) -> None:
        self.clock = FakeClock()
        self.versions = ServedVersions(*served)
        self.sampler = MetricsSampler(self.versions, clock=self.clock, wall_clock=lambda: self.clock.now)

    def tick(self) -> dict:
        self.clock.advance(1.0)
        return self.sampler.sample(devices=FIXED_DEVICES)


@pytest.fixture
def sampled(in_memory_layer) -> Iterator[SampledServer]:
    sampled = SampledServer(Served("alpha", 1), Served("beta", 1), Served("beta", 2))
    live.set_sampler(sampled.sampler)
    yield sampled
    live.set_sampler(None)
