"""The usage ledger on an explicit clock: what each caller used, a minute at a time, handed over once; minutes nobody
takes are dropped; a caller without budgets is counted through the gate all the same."""

from __future__ import annotations

from engine.llm.budgets import BudgetGate
from engine.llm.usage import Usage, UsageLedger, UsageMinute
from engine.serving.admission import ANONYMOUS, Principal


class Clock:
    def __init__(self, now: float = 6000.0) -> None:  # minute 100
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_it_counts_each_callers_tokens_a_minute_at_a_time():
    clock = Clock()
    ledger = UsageLedger(clock)
    ledger.count("ada", Usage(prompt=10, completion=4, cached=8), token=7, user_id=1)
    ledger.count("ada", Usage(prompt=5, completion=1), token=7, user_id=1)
    ledger.count("ada", Usage(prompt=3), token=None, user_id=1)  # a session, no token
    clock.now += 60
    ledger.count("bob", Usage(completion=2), token=9, user_id=2)
    assert ledger.take_minutes() == [
        UsageMinute(100, "ada", 1, None, prompt=3),
        UsageMinute(100, "ada", 1, 7, prompt=15, completion=5, cached=8),
        UsageMinute(101, "bob", 2, 9, completion=2),
    ]


def test_it_hands_each_minute_over_once():
    ledger = UsageLedger(Clock())
    ledger.count("ada", Usage(prompt=1), token=7, user_id=1)
    assert len(ledger.take_minutes()) == 1
    assert ledger.take_minutes() == []
    ledger.count("ada", Usage(prompt=2), token=7, user_id=1)  # the same minute again: only what came since
    assert ledger.take_minutes() == [UsageMinute(100, "ada", 1, 7, prompt=2)]
    assert ledger.usage[("ada", "prompt")] == 3  # /metrics keeps the running total


def test_it_counts_nothing_for_a_request_that_used_nothing():
    ledger = UsageLedger(Clock())
    ledger.count("ada", Usage(), token=7, user_id=1)
    assert ledger.take_minutes() == [] and not ledger.usage


def test_it_drops_minutes_nobody_took_after_it_keeps_them():
    clock = Clock()
    ledger = UsageLedger(clock, keep_minutes=3)
    for _ in range(5):  # minutes 100 to 104
        ledger.count("ada", Usage(prompt=1), user_id=1)
        clock.now += 60
    assert [bucket.minute for bucket in ledger.take_minutes()] == [102, 103, 104]


async def test_it_counts_a_caller_without_budgets_and_an_anonymous_one_through_the_gate():
    gate = BudgetGate(clock=Clock())
    for principal in (Principal("free", user_id=4, token_id=14), ANONYMOUS):
        admission = await gate.admit(principal, 16)
        assert admission.reserved == [] and admission.leases == []
        await admission.settle(Usage(prompt=6, completion=2))
    assert gate.ledger.take_minutes() == [
        UsageMinute(100, "anonymous", None, None, prompt=6, completion=2),
        UsageMinute(100, "free", 4, 14, prompt=6, completion=2),
    ]
