"""Token budgets on an explicit clock: tokens per minute (a sliding minute), concurrent streams (leases), refusals
with their Retry-After, settling, usage per user; and the same counters on a real Redis, shared by two gates."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deploy.processes import RedisServer
from engine.llm.budget_redis import RedisCounters
from engine.llm.budgets import Budget, BudgetExceeded, BudgetGate, LocalCounters
from engine.llm.usage import Usage
from engine.serving.admission import Principal


class Clock:
    def __init__(self, now: float = 600.0) -> None:  # the start of a minute
        self.now = now

    def __call__(self) -> float:
        return self.now


def caller(*budgets: Budget, name: str = "ada") -> Principal:
    return Principal(name, user_id=1, token_id=7, budgets=budgets)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def gate(clock: Clock) -> BudgetGate:
    return BudgetGate(clock=clock)


async def test_it_admits_while_the_minute_is_under_its_limit_then_refuses_with_retry_after(gate, clock):
    ada = caller(Budget("token:7", tokens_per_minute=100))
    first = await gate.admit(ada, 60)
    await gate.admit(ada, 60)  # 60 before it: still under 100, reserved anyway
    clock.now += 15
    with pytest.raises(BudgetExceeded) as refused:
        await gate.admit(ada, 1)
    assert refused.value.status == 429 and refused.value.kind == "tokens"
    assert "100 tokens per minute" in refused.value.message
    # 120 this minute: below 100 once the minute has slid on to 120 * (1 - f) < 100, 10 s into the next
    assert refused.value.retry_after == 55
    await first.settle(Usage(prompt=5, completion=5))  # the reservation becomes what it used: 10 + 60 = 70
    await gate.admit(ada, 1)


async def test_the_previous_minute_slides_out(gate, clock):
    ada = caller(Budget("user:1", tokens_per_minute=100))
    await gate.admit(ada, 100)
    clock.now += 60 + 15  # a quarter into the next minute: 75 of the previous minute's 100 still count
    await gate.admit(ada, 20)  # 75 before it
    await gate.admit(ada, 10)  # 95 before it
    with pytest.raises(BudgetExceeded) as refused:
        await gate.admit(ada, 1)  # 105
    assert refused.value.retry_after == 3  # 30 + 100 * (1 - 0.3) = 100: then the minute has slid enough
    clock.now += 4
    await gate.admit(ada, 1)


async def test_a_refusal_leaves_nothing_reserved(gate, clock):
    user = Budget("user:1", tokens_per_minute=1000)
    token = Budget("token:7", tokens_per_minute=10)
    ada = caller(user, token)
    await gate.admit(ada, 10)
    with pytest.raises(BudgetExceeded):
        await gate.admit(ada, 500)  # the user's budget reserved 500 before the token's refused
    assert await gate.counters.get_tokens("infera:budget:tpm:user:1:10") == 10


async def test_concurrent_streams_are_leases_given_back_when_settled(gate):
    ada = caller(Budget("token:7", concurrent_streams=2))
    first = await gate.admit(ada, 16)
    await gate.admit(ada, 16)
    with pytest.raises(BudgetExceeded) as refused:
        await gate.admit(ada, 16)
    assert refused.value.kind == "requests" and refused.value.retry_after == 1
    await first.settle(None)
    await first.settle(None)  # once only: a second settle gives back nothing more
    await gate.admit(ada, 16)
    with pytest.raises(BudgetExceeded):
        await gate.admit(ada, 16)


async def test_a_lease_a_dead_replica_kept_expires(clock):
    gate = BudgetGate(clock=clock, lease_seconds=30)
    ada = caller(Budget("token:7", concurrent_streams=1))
    await gate.admit(ada, 16)  # never settled: its replica died
    with pytest.raises(BudgetExceeded):
        await gate.admit(ada, 16)
    clock.now += 31
    await gate.admit(ada, 16)


async def test_the_max_tokens_ceiling_is_the_lowest_set():
    assert BudgetGate.ceiling(caller()) is None
    assert BudgetGate.ceiling(caller(Budget("user:1", max_tokens=64), Budget("token:7", max_tokens=32))) == 32
    assert BudgetGate.ceiling(caller(Budget("user:1", max_tokens=64), Budget("token:7", tokens_per_minute=9))) == 64


async def test_usage_is_counted_per_user_and_per_token_for_metrics(gate):
    for name in ("ada", "ada", "bob"):
        admission = await gate.admit(caller(name=name), 16)
        await admission.settle(Usage(prompt=10, completion=4, cached=8))
    family, per_token = gate.ledger.collect()
    samples = {(s.labels["user"], s.labels["kind"]): s.value for s in family.samples}
    assert family.name == "infera_llm_usage_tokens"
    assert samples == {
        ("ada", "prompt"): 20,
        ("ada", "completion"): 8,
        ("ada", "cached"): 16,
        ("bob", "prompt"): 10,
        ("bob", "completion"): 4,
        ("bob", "cached"): 8,
    }
    assert all(s.name == "infera_llm_usage_tokens_total" for s in family.samples)
    tokens = {(s.labels["token"], s.labels["user"], s.labels["kind"]): s.value for s in per_token.samples}
    assert tokens[("7", "ada", "completion")] == 8 and tokens[("7", "bob", "prompt")] == 10  # caller(): token 7


async def test_local_counters_forget_an_expired_minute(clock):
    counters = LocalCounters(clock)
    assert await counters.add_tokens("k", 5, 120) == 5
    clock.now += 121
    assert await counters.get_tokens("k") == 0
    assert await counters.add_tokens("k", 3, 120) == 3


# --- on Redis: what two replicas share ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = RedisServer(tmp_path_factory.mktemp("budget-redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


async def test_two_gates_on_one_redis_see_each_others_reservations(redis_url, clock):
    replicas = [BudgetGate(RedisCounters(redis_url), clock=clock, prefix="test:tpm") for _ in range(2)]
    ada = caller(Budget("token:7", tokens_per_minute=50))
    try:
        await replicas[0].admit(ada, 50)
        with pytest.raises(BudgetExceeded):
            await replicas[1].admit(ada, 1)
    finally:
        for gate in replicas:
            await gate.counters.close()


async def test_two_gates_on_one_redis_share_the_stream_slots(redis_url, clock):
    replicas = [BudgetGate(RedisCounters(redis_url), clock=clock, prefix="test:streams") for _ in range(2)]
    ada = caller(Budget("token:7", concurrent_streams=1))
    try:
        held = await replicas[0].admit(ada, 8)
        with pytest.raises(BudgetExceeded):
            await replicas[1].admit(ada, 8)
        await held.settle(None)
        await replicas[1].admit(ada, 8)
    finally:
        for gate in replicas:
            await gate.counters.close()


async def test_redis_counters_fall_back_to_this_process_while_redis_is_down(clock):
    counters = RedisCounters("redis://127.0.0.1:1/0")  # nothing listens there
    gate = BudgetGate(counters, clock=clock)
    ada = caller(Budget("token:7", tokens_per_minute=10, concurrent_streams=1))
    try:
        await gate.admit(ada, 10)
        with pytest.raises(BudgetExceeded):
            await gate.admit(ada, 1)
    finally:
        await counters.close()
