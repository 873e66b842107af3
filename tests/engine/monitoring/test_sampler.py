"""The per-second sampler: rates, percentiles, queue and compute time, batch sizes, backlog and publishing."""

from __future__ import annotations

import asyncio

from engine.monitoring.sampler import MetricsSampler
from tests.engine.monitoring.stand_ins import FIXED_DEVICES, Served, ServedVersions, run_batch


def make_sampler(clock, *served: Served, **kwargs) -> tuple[MetricsSampler, ServedVersions]:
    server = ServedVersions(*served)
    sampler = MetricsSampler(server, clock=clock, wall_clock=lambda: clock.now, **kwargs)
    return sampler, server


def model(snapshot: dict, name: str = "m", version: int = 1) -> dict:
    return next(m for m in snapshot["models"] if (m["name"], m["version"]) == (name, version))


def test_it_takes_history_before_the_first_sample_as_a_baseline(clock):
    served = Served("m", 1)
    run_batch(served.stats, [5.0] * 4)
    sampler, _ = make_sampler(clock, served)
    first = model(sampler.sample(devices=FIXED_DEVICES))
    assert first["success_per_s"] == 0.0
    assert first["latency_ms"] is None
    assert first["batch_sizes"] == {}


def test_it_turns_counter_differences_into_rates_per_second(clock):
    served = Served("m", 1)
    sampler, _ = make_sampler(clock, served)
    sampler.sample(devices=FIXED_DEVICES)
    run_batch(served.stats, [3.0] * 8)
    run_batch(served.stats, [3.0] * 2)
    served.stats.record_failure(1_000_000)
    served.stats.record_failure(1_000_000)
    clock.advance(2.0)
    entry = model(sampler.sample(devices=FIXED_DEVICES))
    assert entry["success_per_s"] == 5.0
    assert entry["failure_per_s"] == 1.0
    assert entry["inferences_per_s"] == 5.0
    assert entry["executions_per_s"] == 1.0


def test_it_computes_latency_percentiles_over_the_last_interval_only(clock):
    served = Served("m", 1)
    sampler, _ = make_sampler(clock, served)
    run_batch(served.stats, [900.0] * 50)  # before the first sample: not part of any interval
    sampler.sample(devices=FIXED_DEVICES)
    run_batch(served.stats, [float(ms) for ms in range(1, 101)])
    clock.advance(1.0)
    entry = model(sampler.sample(devices=FIXED_DEVICES))
    assert entry["latency_ms"] == {"p50": 50.0, "p95": 95.0, "p99": 99.0}
    run_batch(served.stats, [7.0])
    clock.advance(1.0)
    assert model(sampler.sample(devices=FIXED_DEVICES))["latency_ms"] == {"p50": 7.0, "p95": 7.0, "p99": 7.0}
    clock.advance(1.0)
    assert model(sampler.sample(devices=FIXED_DEVICES))["latency_ms"] is None


def test_it_reports_mean_latency_queue_and_compute_time_per_request(clock):
    served = Served("m", 1)
    sampler, _ = make_sampler(clock, served)
    sampler.sample(devices=FIXED_DEVICES)
    run_batch(served.stats, [10.0, 10.0], queue_ms=4.0, compute_ms=6.0)
    run_batch(served.stats, [10.0, 10.0], queue_ms=2.0, compute_ms=2.0)
    clock.advance(1.0)
    entry = model(sampler.sample(devices=FIXED_DEVICES))
    assert entry["queue_ms"] == 3.0
    assert entry["compute_ms"] == 4.0
    assert entry["mean_latency_ms"] == 10.0
    clock.advance(1.0)
    idle = model(sampler.sample(devices=FIXED_DEVICES))
    assert idle["queue_ms"] is None and idle["compute_ms"] is None and idle["mean_latency_ms"] is None


def test_it_counts_executions_per_batch_size_in_the_interval(clock):
    served = Served("m", 1)
    sampler, _ = make_sampler(clock, served)
    run_batch(served.stats, [1.0] * 4)
    sampler.sample(devices=FIXED_DEVICES)
    for size in (4, 4, 1, 8):
        run_batch(served.stats, [1.0] * size)
    clock.advance(1.0)
    assert model(sampler.sample(devices=FIXED_DEVICES))["batch_sizes"] == {"1": 1, "4": 2, "8": 1}


def test_it_shows_pending_requests_and_state(clock):
    served = Served("m", 1)
    served.stats.pending = 3
    sampler, _ = make_sampler(clock, served)
    entry = model(sampler.sample(devices=FIXED_DEVICES))
    assert entry["pending"] == 3
    assert entry["state"] == "READY"


def test_it_counts_a_version_loaded_between_samples_from_zero(clock):
    sampler, server = make_sampler(clock, Served("m", 1))
    sampler.sample(devices=FIXED_DEVICES)
    reloaded = Served("m", 1)
    run_batch(reloaded.stats, [2.0] * 3)
    server.served = [reloaded, Served("other", 2)]
    clock.advance(1.0)
    snapshot = sampler.sample(devices=FIXED_DEVICES)
    assert model(snapshot)["success_per_s"] == 3.0
    assert model(snapshot, "other", 2)["success_per_s"] == 0.0


def test_it_keeps_fifteen_minutes_of_backlog(clock):
    sampler, _ = make_sampler(clock, Served("m", 1))
    for _ in range(1000):
        sampler.sample(devices=FIXED_DEVICES)
        clock.advance(1.0)
    backlog = sampler.backlog()
    assert len(backlog) == 900
    assert backlog[-1]["t"] - backlog[0]["t"] == 899_000
    assert len(sampler.backlog(seconds=60)) == 60


def test_it_narrows_the_backlog_to_one_model(clock):
    sampler, _ = make_sampler(clock, Served("a", 1), Served("b", 1), Served("b", 2))
    sampler.sample(devices=FIXED_DEVICES)
    (snapshot,) = sampler.backlog(model="b")
    assert [(m["name"], m["version"]) for m in snapshot["models"]] == [("b", 1), ("b", 2)]
    assert snapshot["devices"]["cpu"]["utilization"] == 0.25


async def test_it_publishes_to_every_subscriber_even_after_one_fails(clock):
    sampler, _ = make_sampler(clock, Served("m", 1))
    received: list[dict] = []

    async def collect(snapshot: dict) -> None:
        received.append(snapshot)

    def broken(snapshot: dict) -> None:
        raise RuntimeError("subscriber bug")

    sampler.subscribe(broken)
    sampler.subscribe(collect)
    sampler.subscribe(received.append)
    await sampler.publish(sampler.sample(devices=FIXED_DEVICES))
    assert len(received) == 2
    sampler.unsubscribe(collect)
    await sampler.publish(sampler.sample(devices=FIXED_DEVICES))
    assert len(received) == 3


async def test_it_samples_and_publishes_on_its_own_task_until_stopped():
    server = ServedVersions(Served("m", 1))
    sampler = MetricsSampler(server, interval=0.01)
    three = asyncio.Event()
    received: list[dict] = []

    def collect(snapshot: dict) -> None:
        received.append(snapshot)
        if len(received) == 3:
            three.set()

    sampler.subscribe(collect)
    task = sampler.start()
    assert sampler.start() is task
    await asyncio.wait_for(three.wait(), timeout=10)
    await sampler.stop()
    assert task.done()
    assert received[-1]["models"][0]["name"] == "m"
    assert "cpu" in received[-1]["devices"]


def test_it_splits_requests_by_the_front_end_they_came_through(clock):
    served = Served("m", 1)
    sampler, _ = make_sampler(clock, served)
    sampler.sample(devices=FIXED_DEVICES)
    run_batch(served.stats, [1.0] * 6)  # HTTP
    for _ in range(3):
        served.stats.record_success(1_000_000, 0, protocol="grpc")
    served.stats.record_failure(1_000_000, protocol="grpc")
    clock.advance(2.0)
    assert model(sampler.sample(devices=FIXED_DEVICES))["protocols"] == {"grpc": 2.0, "http": 3.0}


def test_it_sums_the_whole_server_up_in_each_snapshot(clock):
    fast, slow = Served("fast", 1), Served("slow", 1)
    sampler, _ = make_sampler(clock, fast, slow)
    sampler.sample(devices=FIXED_DEVICES)
    run_batch(fast.stats, [1.0] * 6)
    fast.stats.record_failure(1_000_000)
    fast.stats.record_failure(1_000_000)
    run_batch(slow.stats, [30.0] * 2)
    clock.advance(2.0)
    server = sampler.sample(devices=FIXED_DEVICES)["server"]
    assert server == {"requests_per_s": 5.0, "failures_per_s": 1.0, "error_rate": 0.2, "p99_ms": 30.0}


def test_it_counts_only_what_clients_sent_for_the_server(clock):
    pipeline, step = Served("pipeline", 1), Served("step", 1)
    sampler, _ = make_sampler(clock, pipeline, step)
    sampler.sample(devices=FIXED_DEVICES)
    for _ in range(2):
        pipeline.stats.record_success(2_000_000, 0)
        pipeline.stats.record_success(2_000_000, 0, protocol="grpc")
        for inside in ("ensemble", "ensemble", "bls", "shadow"):
            step.stats.record_success(1_000_000, 0, protocol=inside)
    clock.advance(1.0)
    snapshot = sampler.sample(devices=FIXED_DEVICES)
    assert snapshot["server"]["requests_per_s"] == 4.0
    assert model(snapshot, "step")["success_per_s"] == 8.0


def test_it_hands_on_each_minute_as_it_closes_and_the_hours_figures_every_ten_seconds(clock):
    served = Served("m", 1)
    clock.now = 600.0  # the start of a minute of the wall clock
    sampler, _ = make_sampler(clock, served)
    sampler.sample(devices=FIXED_DEVICES)
    hours = []
    for _ in range(59):
        run_batch(served.stats, [4.0] * 3)
        clock.advance(1.0)
        snapshot = sampler.sample(devices=FIXED_DEVICES)
        assert "minute" not in snapshot
        hours.append("hour" in snapshot)
    assert hours == [(second + 1) % 10 == 0 for second in range(59)]  # the first sample carried one too
    clock.advance(1.0)
    closing = sampler.sample(devices=FIXED_DEVICES)
    assert closing["minute"]["t"] == 600_000
    assert closing["minute"]["requests_per_s"] == 3.0  # 59 sampled seconds, 3 requests each
    assert closing["minute"]["models"]["m"]["p99_ms"] == 4.0
    assert closing["hour"]["seconds"] == 60.0
    assert sampler.history.minutes() == [closing["minute"]]
