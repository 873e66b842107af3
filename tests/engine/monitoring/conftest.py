"""Fixtures of the engine monitoring tests."""

from __future__ import annotations

import pytest

from tests.engine.monitoring.stand_ins import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
