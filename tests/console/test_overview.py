"""The overview's data (console/overview.py): model health from the registry and the engine, worst first; the
server's figures now and over the hour; devices; the last audit events; no server paths."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from console.audit.models import AuditEvent
from console.overview import build_overview, device_gauges, formatted
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from engine.monitoring.sampler import MetricsSampler
from engine.serving.model_status import ModelState, ModelStatus, VersionStatus
from tests.engine.monitoring.stand_ins import FIXED_DEVICES, FakeClock, Served, ServedVersions, run_batch

pytestmark = pytest.mark.django_db


def model(name: str, *versions: tuple[str, bool, str], active: int | None = None, **fields) -> RegisteredModel:
    """A registered model with versions 1, 2, ... given as (state, should_load, error)."""
    registered = RegisteredModel.objects.create(name=name, **fields)
    for number, (state, should_load, error) in enumerate(versions, start=1):
        version = ModelVersion.objects.create(
            model=registered, number=number, state=state, should_load=should_load, error=error
        )
        if number == active:
            registered.active_version = version
            registered.save()
    return registered


class Engine:
    """What the overview asks of InferenceServer: typed status per model, Triton's repository index and the memory
    budget's use."""

    def __init__(self, statuses: dict[str, ModelStatus], index: list[dict] | None = None) -> None:
        self.statuses = statuses
        self.index = index or []

    def status(self, name: str) -> ModelStatus:
        return self.statuses.get(name, ModelStatus(name))

    def repository_index(self) -> list[dict]:
        return self.index

    def memory_use(self) -> dict:
        return {"pools": {"host": {"budget": None, "used": 0}}, "loads": 0, "evictions": 0}


def runtime(server=None, sampler=None) -> SimpleNamespace:
    return SimpleNamespace(server=server, sampler=sampler, state="ready", startup_failure=None)


def status(name: str, active: int, **states: tuple[ModelState, str]) -> ModelStatus:
    """`states`: v1=(ModelState.READY, "") ..."""
    versions = {int(key[1:]): VersionStatus(int(key[1:]), state, reason) for key, (state, reason) in states.items()}
    return ModelStatus(name, versions, active)


READY, FAILED, PENDING = VersionState.READY, VersionState.FAILED, VersionState.PENDING


def test_it_puts_failed_and_degraded_models_first_with_their_reasons():
    model("alpha", (READY, True, ""), active=1)
    model("beta", (FAILED, True, "ONNX model is invalid"), active=1)
    model("gamma", (READY, True, ""), (FAILED, True, "input 'x' expects shape [4]"), active=1)
    model("delta", (PENDING, True, ""), active=1)
    model("epsilon")
    cards = build_overview(None).cards
    assert [(card.name, card.health) for card in cards] == [
        ("beta", "failed"),
        ("gamma", "degraded"),
        ("delta", "loading"),
        ("alpha", "ready"),
        ("epsilon", "idle"),
    ]
    assert cards[0].reason == "version 1: ONNX model is invalid"
    assert cards[1].summary == "version 1 serves"
    assert cards[1].reason == "version 2: input 'x' expects shape [4]"
    assert cards[4].summary == "no version uploaded"
    assert build_overview(None).counts == {"failed": 1, "degraded": 1, "loading": 1, "ready": 1, "idle": 1}
    assert [card.name for card in build_overview(None).attention] == ["beta", "gamma"]


def test_it_takes_what_serves_from_the_engine():
    model("alpha", (READY, True, ""), active=1)  # the registry has not seen the engine lose it yet
    model("beta", (READY, True, ""), (PENDING, True, ""), active=1)
    engine = Engine(
        {
            "alpha": status("alpha", 1, v1=(ModelState.UNAVAILABLE, "the instance crashed")),
            "beta": status("beta", 1, v1=(ModelState.READY, ""), v2=(ModelState.LOADING, "")),
        },
        index=[{"name": "stray", "version": "1", "state": "UNAVAILABLE", "reason": "no model file"}],
    )
    cards = {card.name: card for card in build_overview(runtime(engine)).cards}
    assert (cards["alpha"].health, cards["alpha"].reason) == ("failed", "version 1: the instance crashed")
    assert (cards["beta"].health, cards["beta"].summary) == ("ready", "version 1 serves; version 2 loading")
    assert cards["beta"].serving == 1
    assert (cards["stray"].health, cards["stray"].registered) == ("failed", False)
    assert "not registered" in cards["stray"].summary


def test_it_shows_no_server_path_in_descriptions_or_reasons(settings):
    store = settings.INFERA.model_store
    model("alpha", (FAILED, True, f"cannot read {store}/alpha/1/model.onnx"), description="from /home/ada/models")
    card = build_overview(None).cards[0]
    assert card.reason == "version 1: cannot read alpha/1/model.onnx"
    assert card.description == "from …/models"


def test_it_shows_the_servers_figures_now_and_over_the_hour():
    clock = FakeClock(600.0)
    served = Served("alpha", 1)
    sampler = MetricsSampler(ServedVersions(served), clock=clock, wall_clock=lambda: clock.now)
    sampler.sample(devices=FIXED_DEVICES)
    run_batch(served.stats, [4.0] * 20)
    served.stats.record_failure(1_000_000)
    clock.advance(2.0)
    sampler.sample(devices=FIXED_DEVICES)
    overview = build_overview(runtime(Engine({}), sampler))
    assert overview.now == {"requests_per_s": 10.5, "failures_per_s": 0.5, "error_rate": 0.0476, "p99_ms": 4.0}
    assert overview.hour["requests_per_s"] == 10.5
    figures = {figure.key: (figure.now, figure.hour) for figure in overview.figures}
    assert figures == {
        "requests_per_s": ("11/s", "11/s"),
        "p99_ms": ("4.00 ms", "4.00 ms"),
        "error_rate": ("4.8%", "4.8%"),
    }
    assert overview.sampling and overview.device_keys == "cpu"


def test_it_says_so_before_the_engine_samples():
    overview = build_overview(runtime(Engine({}), MetricsSampler(ServedVersions())))
    assert not overview.sampling
    assert [figure.now for figure in overview.figures] == ["–", "–", "–"]
    assert overview.devices == []


def test_it_formats_figures_as_the_page_script_does():
    assert formatted(7.25, "rate") == "7.2/s" and formatted(12.5, "rate") == "13/s"
    assert formatted(3.104, "ms") == "3.10 ms" and formatted(12.34, "ms") == "12.3 ms"
    assert formatted(0.0123, "percent") == "1.2%" and formatted(None, "ms") == "–"


def test_it_shows_each_gpu_or_else_the_cpu():
    gpu = {"index": 1, "name": "H200", "utilization": 0.5, "memory_used_bytes": 1 << 30, "memory_total_bytes": 4 << 30}
    gauges = device_gauges({"cpu": FIXED_DEVICES.to_dict()["cpu"], "gpus": [gpu]})
    assert [(g.key, g.label, g.utilization, g.memory_fraction) for g in gauges] == [
        ("gpu:1", "GPU 1 · H200", 0.5, 0.25)
    ]
    cpu = device_gauges(FIXED_DEVICES.to_dict())
    assert [(g.key, g.utilization, g.memory_fraction) for g in cpu] == [("cpu", 0.25, 0.25)]


def test_it_lists_the_last_eight_audit_events_newest_first():
    for number in range(10):
        AuditEvent.record("ada", "version.activate", f"alpha/{number}")
    assert [event.object for event in build_overview(None).audit] == [f"alpha/{n}" for n in range(9, 1, -1)]


def test_its_signature_changes_with_a_models_state_only():
    alpha = model("alpha", (READY, True, ""), active=1)
    before = build_overview(None).signature
    assert build_overview(None).signature == before
    alpha.versions.update(state=FAILED, error="gone")
    assert build_overview(None).signature != before
