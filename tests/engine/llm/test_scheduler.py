"""The LLM scheduler's decisions on an explicit clock: admission, chunked prefill, preemption, finishing, priority."""

from __future__ import annotations

import random

import pytest

from engine.errors import InvalidArgument
from engine.llm.kv_blocks import BlockManager
from engine.llm.scheduler import FinishReason, LLMScheduler, LLMSequence, SequenceStatus, StepPlan
from tests.engine.llm.block_invariants import check

VOCAB = 1000


def model(tokens: list[int]) -> int:
    """A stand-in for a model: the next token is a function of every token before it."""
    return (sum(t * (i + 1) for i, t in enumerate(tokens)) + 7) % VOCAB


def scheduler(
    num_blocks=64, block_size=4, budget=64, max_seqs=8, max_len=None, caching=True, watermark=0.0
) -> LLMScheduler:
    blocks = BlockManager(num_blocks, block_size, enable_prefix_caching=caching)
    return LLMScheduler(blocks, budget, max_seqs, max_len or num_blocks * block_size, watermark)


def seq(seq_id, prompt, max_tokens=4, now=0.0, **fields) -> LLMSequence:
    return LLMSequence(seq_id, list(prompt), max_tokens, now, **fields)


def step(sched: LLMScheduler, now: float = 0.0):
    """Plan a step, check it against the sequences, sample with `model`, apply it; the plan and outputs."""
    plan = sched.schedule(now)
    sampled = {}
    for chunk in plan.chunks:
        s = sched.get(chunk.seq_id)
        assert chunk.token_ids == tuple(s.all_token_ids[chunk.start : chunk.start + chunk.num_tokens])
        assert chunk.start == s.num_computed_tokens
        assert len(chunk.block_table) * sched.blocks.block_size >= chunk.start + chunk.num_tokens
        if chunk.samples:
            sampled[chunk.seq_id] = model(s.all_token_ids)
    assert plan.num_batched_tokens <= sched.max_num_batched_tokens
    assert len(sched.running) <= sched.max_num_seqs
    outputs = sched.update_from_output(plan, sampled, now)
    check(sched.blocks)
    return plan, outputs


def reference(prompt: list[int], max_tokens: int) -> list[int]:
    """What a sequence generates with the cache all to itself."""
    tokens = list(prompt)
    for _ in range(max_tokens):
        tokens.append(model(tokens))
    return tokens[len(prompt) :]


def drain(sched: LLMScheduler, finished: dict, now: float = 0.0, limit: int = 10_000) -> float:
    """Step until nothing is left; finished sequences' outputs by id. Returns the clock."""
    live = {s.seq_id: s for s in sched.running + sched.waiting}
    while sched.has_work():
        now += 1.0
        _, outputs = step(sched, now)
        for out in outputs:
            if out.finish_reason is not None:
                finished[out.seq_id] = live[out.seq_id]
        limit -= 1
        assert limit, "the scheduler made no progress"
    return now


# --- configuration and requests ---------------------------------------------------------------------------------


def test_it_refuses_a_budget_below_the_sequence_cap():
    with pytest.raises(InvalidArgument, match=r"max_num_batched_tokens \(4\) must be at least max_num_seqs \(8\)"):
        scheduler(budget=4, max_seqs=8)


def test_it_refuses_a_model_length_the_cache_cannot_hold():
    with pytest.raises(InvalidArgument, match="capacity .*= 64.*got 65"):
        scheduler(num_blocks=16, block_size=4, max_len=65)


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "message"),
    [([], 4, "prompt is empty"), (range(32), 4, "max_model_len is 32"), ([1], 0, "max_tokens must be at least 1")],
)
def test_it_refuses_a_request_that_cannot_run(prompt, max_tokens, message):
    sched = scheduler(max_len=32)
    with pytest.raises(InvalidArgument, match=message):
        sched.add_request(seq("a", prompt, max_tokens))


def test_it_refuses_a_request_id_already_generating():
    sched = scheduler()
    sched.add_request(seq("a", [1]))
    with pytest.raises(InvalidArgument, match="'a' is already generating"):
        sched.add_request(seq("a", [2]))


def test_it_plans_nothing_without_work():
    sched = scheduler()
    plan = sched.schedule(0.0)
    assert plan.is_empty and plan == StepPlan()
    assert sched.schedule(0.0).is_empty  # an empty plan needs no output


def test_it_plans_once_per_output():
    sched = scheduler()
    sched.add_request(seq("a", [1, 2]))
    sched.schedule(0.0)
    with pytest.raises(RuntimeError, match="update_from_output"):
        sched.schedule(0.0)


def test_it_needs_a_token_for_every_sampling_sequence():
    sched = scheduler()
    sched.add_request(seq("a", [1, 2]))
    plan = sched.schedule(0.0)
    with pytest.raises(ValueError, match="no token for sequence 'a'"):
        sched.update_from_output(plan, {}, 0.0)


# --- prefill and decode -----------------------------------------------------------------------------------------


def test_a_short_prompt_prefills_in_one_step_then_decodes():
    sched = scheduler(block_size=4)
    sched.add_request(seq("a", [5, 6, 7, 8, 9], max_tokens=3))
    plan, outputs = step(sched)
    (chunk,) = plan.prefills
    assert (chunk.start, chunk.num_tokens, chunk.samples) == (0, 5, True)
    assert len(chunk.block_table) == 2
    assert [o.token_id for o in outputs] == [model([5, 6, 7, 8, 9])]
    plan, _ = step(sched)
    assert not plan.prefills
    (chunk,) = plan.decodes
    assert (chunk.start, chunk.num_tokens, chunk.samples) == (5, 1, True)


def test_it_generates_what_the_model_says():
    sched = scheduler()
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    sched.add_request(seq("a", prompt, max_tokens=10))
    done = {}
    drain(sched, done)
    assert done["a"].output_token_ids == reference(prompt, 10)


def test_a_long_prompt_is_prefilled_in_chunks_under_the_budget():
    sched = scheduler(budget=8, max_seqs=4)
    prompt = list(range(1, 21))
    sched.add_request(seq("long", prompt, max_tokens=2))
    chunks = []
    while not sched.get("long").output_token_ids:
        plan, _ = step(sched)
        chunks.extend((c.start, c.num_tokens, c.samples) for c in plan.prefills)
    assert chunks == [(0, 8, False), (8, 8, False), (16, 4, True)]


def test_decodes_keep_going_while_a_long_prompt_prefills():
    sched = scheduler(budget=8, max_seqs=4)
    for name in ("x", "y"):
        sched.add_request(seq(name, [1, 2], max_tokens=50))
    step(sched)  # both prefilled
    sched.add_request(seq("long", list(range(30)), max_tokens=5, now=1.0))
    steps = 0
    while not sched.get("long").output_token_ids:
        plan, _ = step(sched, now=1.0 + steps)
        steps += 1
        assert {c.seq_id for c in plan.decodes} == {"x", "y"}, "a decode stalled"
        assert [c.seq_id for c in plan.prefills] == ["long"]
        assert plan.prefills[0].num_tokens == 6  # the budget left after two decodes
    assert steps == 5  # ceil(30 / 6): its first token is bounded by the budget, whatever else runs


def test_new_requests_join_between_steps():
    sched = scheduler()
    sched.add_request(seq("a", [1, 2], max_tokens=10))
    step(sched)
    sched.add_request(seq("b", [3, 4], max_tokens=10, now=1.0))
    plan, _ = step(sched, 1.0)
    assert [c.seq_id for c in plan.decodes] == ["a"]
    assert [c.seq_id for c in plan.prefills] == ["b"]


def test_it_runs_at_most_max_num_seqs():
    sched = scheduler(max_seqs=2)
    for name in "abc":
        sched.add_request(seq(name, [1], max_tokens=3))
    plan, _ = step(sched)
    assert [c.seq_id for c in plan.prefills] == ["a", "b"]
    assert [s.seq_id for s in sched.waiting] == ["c"]
    step(sched)
    step(sched)  # a and b finish (3 tokens)
    plan, _ = step(sched)
    assert [c.seq_id for c in plan.prefills] == ["c"]
    assert plan.finished == ("a", "b")


# --- admission by free blocks -----------------------------------------------------------------------------------


def test_it_admits_by_free_blocks_and_lets_no_one_overtake():
    sched = scheduler(num_blocks=4, block_size=4, caching=False)
    sched.add_request(seq("a", range(1, 11), max_tokens=2))  # 3 blocks
    sched.add_request(seq("big", range(20, 30), max_tokens=2))  # 3 blocks: waits
    sched.add_request(seq("small", [40], max_tokens=2))  # 1 block would fit, but it came later
    plan, _ = step(sched)
    assert [c.seq_id for c in plan.prefills] == ["a"]
    assert [s.seq_id for s in sched.waiting] == ["big", "small"]
    step(sched)  # a finishes
    plan, _ = step(sched)
    assert [c.seq_id for c in plan.prefills] == ["big", "small"]


def test_the_watermark_keeps_blocks_for_growing_sequences():
    sched = scheduler(num_blocks=10, block_size=4, caching=False, watermark=0.2)
    sched.add_request(seq("a", range(1, 33), max_tokens=2))  # 8 blocks: leaves 2, the watermark
    sched.add_request(seq("b", [1], max_tokens=2))
    plan, _ = step(sched)
    assert [c.seq_id for c in plan.prefills] == ["a"]


def test_a_sequence_alone_may_use_the_whole_cache_despite_the_watermark():
    sched = scheduler(num_blocks=10, block_size=4, caching=False, watermark=0.2)
    sched.add_request(seq("a", range(1, 40), max_tokens=1))  # all 10 blocks
    plan, outputs = step(sched)
    assert [c.seq_id for c in plan.prefills] == ["a"] and outputs[0].finish_reason is FinishReason.LENGTH


# --- finishing ----------------------------------------------------------------------------------------------------


def test_it_finishes_on_max_tokens():
    sched = scheduler()
    sched.add_request(seq("a", [1, 2], max_tokens=2))
    step(sched)
    _, (out,) = step(sched)
    assert out.finish_reason is FinishReason.LENGTH == "length"
    assert sched.get("a") is None and not sched.has_work()
    assert sched.blocks.num_free_blocks == sched.blocks.num_blocks  # freed at once


def test_it_finishes_on_the_eos_token():
    sched = scheduler()
    first = model([1, 2])
    sched.add_request(seq("a", [1, 2], max_tokens=10, eos_token_id=first))
    _, (out,) = step(sched)
    assert out.token_id == first and out.finish_reason is FinishReason.STOP


def test_it_finishes_on_a_stop_token_id():
    sched = scheduler()
    second = reference([1, 2], 2)[1]
    sched.add_request(seq("a", [1, 2], max_tokens=10, stop_token_ids=frozenset({second})))
    step(sched)
    _, (out,) = step(sched)
    assert out.finish_reason is FinishReason.STOP and out.token_id == second


def test_it_finishes_at_the_models_length():
    sched = scheduler(max_len=6)
    sched.add_request(seq("a", [1, 2, 3, 4], max_tokens=100))
    done = {}
    drain(sched, done)
    assert len(done["a"].output_token_ids) == 2 and done["a"].finish_reason is FinishReason.LENGTH


def test_a_finished_sequence_is_listed_in_the_next_plan():
    sched = scheduler()
    sched.add_request(seq("a", [1], max_tokens=1))
    sched.add_request(seq("b", [1], max_tokens=3))
    step(sched)
    plan, _ = step(sched)
    assert plan.finished == ("a",)
    plan, _ = step(sched)
    assert plan.finished == ()


# --- aborting -----------------------------------------------------------------------------------------------------


def test_aborting_a_running_sequence_frees_its_blocks_at_once():
    sched = scheduler()
    sched.add_request(seq("a", range(10), max_tokens=10))
    step(sched)
    aborted = sched.abort("a", 2.0)
    assert aborted.finish_reason is FinishReason.ABORT and aborted.finished_at == 2.0
    assert aborted.status is SequenceStatus.FINISHED
    assert sched.blocks.usage == 0 and "a" not in sched.blocks
    assert sched.schedule(3.0).finished == ("a",)
    assert sched.abort("a", 3.0) is None


def test_aborting_a_waiting_sequence_removes_it():
    sched = scheduler(max_seqs=1)
    sched.add_request(seq("a", [1], max_tokens=10))
    sched.add_request(seq("b", [1], max_tokens=10))
    step(sched)
    sched.abort("b", 1.0)
    assert sched.waiting == []
    check(sched.blocks)


def test_a_sequence_aborted_during_a_step_ignores_its_token():
    sched = scheduler()
    sched.add_request(seq("a", [1, 2], max_tokens=10))
    sched.add_request(seq("b", [3, 4], max_tokens=10))
    plan = sched.schedule(0.0)
    sched.abort("a", 0.5)  # the client went away while the model ran
    outputs = sched.update_from_output(plan, {"a": 1, "b": 2}, 1.0)
    assert [o.seq_id for o in outputs] == ["b"]
    assert "a" not in sched.blocks
    check(sched.blocks)


# --- preemption -------------------------------------------------------------------------------------------------


def test_it_preempts_the_latest_arrival_when_the_pool_runs_out():
    sched = scheduler(num_blocks=4, block_size=2, caching=False)
    sched.add_request(seq("a", [1, 2, 3], max_tokens=10))  # 2 blocks
    sched.add_request(seq("b", [4, 5, 6], max_tokens=10))  # 2 blocks: the pool is full
    step(sched)  # both prefilled, each has a token to put in its half-full block
    step(sched)  # both decode into their last slot
    plan, _ = step(sched)  # both need a new block: none free
    assert plan.preempted == ("b",)
    assert [c.seq_id for c in plan.decodes] == ["a"]
    b = sched.waiting[0]
    assert b.status is SequenceStatus.PREEMPTED and b.num_preemptions == 1 and b.num_computed_tokens == 0
    assert "b" not in sched.blocks and sched.stats().preemptions == 1


def test_it_preempts_the_lowest_priority_first():
    sched = scheduler(num_blocks=4, block_size=2, caching=False)
    sched.add_request(seq("low", [1, 2, 3], max_tokens=10, priority=5))
    sched.add_request(seq("high", [4, 5, 6], max_tokens=10, priority=0))
    step(sched)
    step(sched)
    plan, _ = step(sched)
    assert plan.preempted == ("low",)
    assert [c.seq_id for c in plan.decodes] == ["high"]


def test_a_sequence_preempts_itself_when_it_is_the_lowest():
    sched = scheduler(num_blocks=4, block_size=2, caching=False)
    sched.add_request(seq("low", [1, 2, 3], max_tokens=10, priority=5))
    step(sched)
    sched.add_request(seq("high", [4, 5, 6], max_tokens=10, priority=0))
    step(sched)  # low decodes into its last slot, high prefills: the pool is full
    plan, _ = step(sched)  # high decodes into its last slot; low needs a block and is the lowest
    assert plan.preempted == ("low",)
    assert [c.seq_id for c in plan.decodes] == ["high"]
    assert [s.seq_id for s in sched.waiting] == ["low"]


def test_a_preempted_sequence_recomputes_its_generated_tokens_first():
    sched = scheduler(num_blocks=4, block_size=2, caching=False)
    sched.add_request(seq("a", [1, 2, 3], max_tokens=3))
    sched.add_request(seq("b", [4, 5, 6], max_tokens=6))
    step(sched)
    step(sched)
    plan, _ = step(sched)
    assert plan.preempted == ("b",)
    generated = list(sched.waiting[0].output_token_ids)
    assert len(generated) == 2
    while True:
        plan, _ = step(sched)
        if plan.prefills:
            break
    (chunk,) = plan.prefills
    assert chunk.seq_id == "b" and chunk.start == 0
    assert chunk.token_ids == (4, 5, 6, *generated)


def test_a_preempted_sequence_goes_to_the_front_of_its_priority():
    sched = scheduler(num_blocks=4, block_size=2, max_seqs=2, caching=False)
    sched.add_request(seq("a", [1, 2, 3], max_tokens=10))
    sched.add_request(seq("b", [4, 5, 6], max_tokens=10))
    step(sched)
    sched.add_request(seq("c", [7], max_tokens=10))  # waits: max_num_seqs
    sched.add_request(seq("urgent", [8], max_tokens=10, priority=-1))  # takes b's place (the latest of priority 0)
    plan, _ = step(sched)
    assert plan.preempted == ("b",)
    assert [c.seq_id for c in plan.prefills] == ["urgent"]  # a higher priority still comes first
    assert [s.seq_id for s in sched.waiting] == ["b", "c"]


def test_preemption_gives_the_same_tokens_as_a_roomy_cache():
    rng = random.Random(3)
    prompts = {f"s{i}": [rng.randrange(VOCAB) for _ in range(rng.randrange(1, 12))] for i in range(12)}
    sched = scheduler(num_blocks=12, block_size=2, budget=16, max_seqs=6)
    for name, prompt in prompts.items():
        sched.add_request(seq(name, prompt, max_tokens=8))
    done = {}
    drain(sched, done)
    assert sched.preemptions > 0
    for name, prompt in prompts.items():
        assert done[name].output_token_ids == reference(prompt, 8), name


# --- priority -----------------------------------------------------------------------------------------------------


def test_a_lower_priority_value_is_admitted_first_then_arrival_order():
    sched = scheduler(max_seqs=1)
    sched.add_request(seq("late", [1], max_tokens=1, priority=1))
    sched.add_request(seq("urgent", [1], max_tokens=1, priority=-3))
    sched.add_request(seq("first", [1], max_tokens=1, priority=0))
    sched.add_request(seq("second", [1], max_tokens=1, priority=0))
    order = []
    while sched.has_work():
        plan, _ = step(sched)
        order.extend(c.seq_id for c in plan.prefills)
    assert order == ["urgent", "first", "second", "late"]


def test_a_waiting_higher_priority_takes_the_place_of_the_lowest_running():
    sched = scheduler(max_seqs=2)
    for name, priority in (("low", 5), ("mid", 1)):
        sched.add_request(seq(name, [1, 2], max_tokens=50, priority=priority))
    step(sched)
    sched.add_request(seq("high", [3], max_tokens=50, priority=0))
    plan, _ = step(sched)
    assert plan.preempted == ("low",)
    assert [c.seq_id for c in plan.decodes] == ["mid"]
    assert [c.seq_id for c in plan.prefills] == ["high"]
    assert [s.seq_id for s in sched.waiting] == ["low"]


def test_a_waiting_sequence_of_the_same_priority_preempts_no_one():
    sched = scheduler(max_seqs=1)
    sched.add_request(seq("first", [1, 2], max_tokens=3, priority=2))
    step(sched)
    sched.add_request(seq("second", [3], max_tokens=3, priority=2))
    plan, _ = step(sched)
    assert plan.preempted == () and [c.seq_id for c in plan.decodes] == ["first"]
    assert [s.seq_id for s in sched.waiting] == ["second"]


def test_a_higher_priority_without_free_blocks_takes_them_from_the_lowest():
    sched = scheduler(num_blocks=4, block_size=2, max_seqs=4, caching=False)
    sched.add_request(seq("low", [1, 2, 3], max_tokens=4, priority=3))
    sched.add_request(seq("later", [4, 5, 6], max_tokens=4, priority=3))  # 2 blocks each: the pool is full
    step(sched)
    sched.add_request(seq("high", [8, 9], max_tokens=2, priority=0))
    plan, _ = step(sched)
    assert plan.preempted == ("later",)  # one is enough: the latest of the lowest
    assert [c.seq_id for c in plan.decodes] == ["low"] and [c.seq_id for c in plan.prefills] == ["high"]


def test_high_priority_finishes_before_the_low_ones_queued_earlier():
    sched = scheduler(max_seqs=1)
    for i in range(4):
        sched.add_request(seq(f"low{i}", [1, i], max_tokens=3, priority=10))
    step(sched)
    sched.add_request(seq("high", [2], max_tokens=3, priority=-1))
    order = []
    now = 0.0
    while sched.has_work():
        now += 1.0
        _, outputs = step(sched, now)
        order += [out.seq_id for out in outputs if out.finish_reason is not None]
    assert order[0] == "high" and order[1:] == ["low0", "low1", "low2", "low3"]


# --- prefix caching -----------------------------------------------------------------------------------------------


def test_a_shared_prefix_is_computed_once():
    sched = scheduler(block_size=4)
    system = list(range(100, 116))  # four blocks
    sched.add_request(seq("a", system + [1], max_tokens=2))
    step(sched)
    sched.add_request(seq("b", system + [2, 3], max_tokens=2))
    plan, _ = step(sched)
    (chunk,) = plan.prefills
    assert (chunk.seq_id, chunk.start, chunk.num_tokens) == ("b", 16, 2)
    assert chunk.block_table[:4] == plan.decodes[0].block_table[:4]
    assert sched.get("b").num_cached_tokens == 16
    assert sched.stats().prefix_hit_rate == pytest.approx(16 / (17 + 18))


def test_a_prefix_still_being_prefilled_is_not_shared():
    sched = scheduler(block_size=4, budget=8)
    system = list(range(100, 116))
    sched.add_request(seq("a", system + [1], max_tokens=2))
    step(sched)  # 8 of its 17 tokens computed
    sched.add_request(seq("b", system + [2], max_tokens=2))
    assert sched.blocks.cached_prefix(system + [2]) == 8


# --- stamps and counters ------------------------------------------------------------------------------------------


def test_it_stamps_queue_time_and_time_to_first_token_on_the_callers_clock():
    sched = scheduler(budget=4, max_seqs=4)
    sched.add_request(seq("a", range(10), max_tokens=3, now=10.0))
    step(sched, 12.0)
    step(sched, 13.0)
    _, (first,) = step(sched, 14.5)
    a = sched.get("a")
    assert a.queue_time == 2.0 and a.ttft == 4.5
    assert first.first and first.since_previous == 4.5
    _, (second,) = step(sched, 15.0)
    assert not second.first and second.since_previous == 0.5


def test_it_counts_for_metrics():
    sched = scheduler(max_seqs=1)
    sched.add_request(seq("a", [1, 2, 3], max_tokens=2))
    sched.add_request(seq("b", [4, 5], max_tokens=2))
    step(sched)
    stats = sched.stats()
    assert (stats.running, stats.waiting, stats.prompt_tokens, stats.generation_tokens) == (1, 1, 3, 1)
    assert stats.kv_usage == pytest.approx(1 / 64)
    drain(sched, {})
    stats = sched.stats()
    assert (stats.running, stats.waiting, stats.prompt_tokens, stats.generation_tokens) == (0, 0, 5, 4)
    assert stats.kv_usage == 0


def test_every_block_returns_after_a_random_workload_with_aborts():
    rng = random.Random(11)
    sched = scheduler(num_blocks=10, block_size=2, budget=10, max_seqs=5)
    prefixes = [[rng.randrange(VOCAB) for _ in range(6)] for _ in range(3)]
    prompts: dict[str, list[int]] = {}
    now = 0.0
    for i in range(60):
        name = f"s{i}"
        prompts[name] = rng.choice(prefixes)[: rng.randrange(7)] + [rng.randrange(VOCAB)]
        sched.add_request(seq(name, prompts[name], max_tokens=rng.randrange(1, 13), now=now, priority=rng.randrange(3)))
        now += 1.0
        step(sched, now)
        if rng.random() < 0.2:
            live = [s.seq_id for s in sched.running + sched.waiting]
            if live:
                sched.abort(rng.choice(live), now)
    done: dict[str, LLMSequence] = {}
    drain(sched, done, now)
    check(sched.blocks)
    assert sched.blocks.usage == 0 and all(b.ref_count == 0 for b in sched.blocks.blocks)
    assert sched.preemptions > 0 and sched.blocks.hits > 0
    for name, s in done.items():
        assert s.output_token_ids == reference(prompts[name], len(s.output_token_ids)), name
