"""The accessor Django code uses to reach the process's InferenceServer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from console import engine_link
from engine.errors import Unavailable


@pytest.fixture
def restore_link() -> Iterator[None]:
    saved, failure = engine_link.server_or_none(), engine_link.startup_failure()
    yield
    engine_link.set_server(saved)
    engine_link.set_startup_failure(failure)


def test_it_says_unavailable_when_no_engine_runs(restore_link: None):
    engine_link.set_server(None)
    with pytest.raises(Unavailable, match="not running") as caught:
        engine_link.get_server()
    assert caught.value.status == 503
    assert engine_link.server_or_none() is None


def test_it_hands_out_the_server_it_was_given(restore_link: None):
    marker = object()
    engine_link.set_server(marker)  # type: ignore[arg-type]
    assert engine_link.get_server() is marker


def test_it_keeps_each_started_hook_once(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(engine_link, "_started_hooks", [])

    async def hook(server: object) -> None:
        return None

    engine_link.on_engine_started(hook)
    engine_link.on_engine_started(hook)
    assert engine_link.started_hooks().count(hook) == 1
