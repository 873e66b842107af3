"""Sampling parameters and the batched sampler on small made-up logits: exact expectations, seeded reproducibility."""

from __future__ import annotations

import math

import pytest
import torch

from engine.errors import InvalidArgument
from engine.llm.sampling import (
    InvalidSamplingParam,
    SampledToken,
    SamplingParams,
    SamplingRow,
    distribution,
    make_generator,
    processed_logits,
    sample,
)

GREEDY = SamplingParams(temperature=0.0)


def logits_of(*rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def probs_logits(*probs) -> torch.Tensor:
    """Logits whose softmax is `probs`."""
    return torch.tensor([[math.log(p) for p in probs]], dtype=torch.float32)


# --- parameters ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "field", "message"),
    [
        ({"n": 0}, "n", "at least 1"),
        ({"n": True}, "n", "must be an integer"),
        ({"max_tokens": 0}, "max_tokens", "at least 1"),
        ({"temperature": -0.1}, "temperature", "0 \\(greedy\\) or more"),
        ({"temperature": float("nan")}, "temperature", "finite number"),
        ({"temperature": "hot"}, "temperature", "finite number"),
        ({"top_p": 0.0}, "top_p", "\\(0, 1\\]"),
        ({"top_p": 1.5}, "top_p", "\\(0, 1\\]"),
        ({"top_k": -2}, "top_k", "-1 or 0"),
        ({"top_k": 1.5}, "top_k", "integer"),
        ({"min_p": 1.1}, "min_p", "\\[0, 1\\]"),
        ({"repetition_penalty": 0.0}, "repetition_penalty", "greater than 0"),
        ({"presence_penalty": 2.5}, "presence_penalty", "\\[-2, 2\\]"),
        ({"frequency_penalty": -3}, "frequency_penalty", "\\[-2, 2\\]"),
        ({"logit_bias": {5: 101}}, "logit_bias", "token 5 must be in \\[-100, 100\\]"),
        ({"logit_bias": {-1: 1}}, "logit_bias", "token ids are 0 or more"),
        ({"logit_bias": [1, 2]}, "logit_bias", "must map token ids"),
        ({"seed": 1.5}, "seed", "integer"),
        ({"stop_token_ids": (1, -2)}, "stop_token_ids", "holds -2"),
        ({"logprobs": 21}, "logprobs", "from 0 to 20"),
        ({"logprobs": -1}, "logprobs", "from 0 to 20"),
    ],
)
def test_it_refuses_a_parameter_out_of_range_naming_it(options, field, message):
    with pytest.raises(InvalidSamplingParam, match=message) as raised:
        SamplingParams(**options)
    assert raised.value.field == field
    assert str(raised.value).startswith(field)
    assert isinstance(raised.value, InvalidArgument) and raised.value.status == 400


def test_its_defaults_sample_the_whole_distribution():
    params = SamplingParams()
    assert (params.n, params.temperature, params.top_p, params.top_k, params.min_p) == (1, 1.0, 1.0, 0, 0.0)
    assert not params.greedy and not params.penalised and params.seed is None and params.logprobs is None


def test_a_temperature_under_the_epsilon_is_greedy():
    assert SamplingParams(temperature=0).greedy
    assert SamplingParams(temperature=1e-6).greedy
    assert not SamplingParams(temperature=1e-4).greedy


def test_it_reads_a_requests_options():
    params = SamplingParams.from_options(
        {"temperature": 0.5, "logit_bias": {"42": -100, "7": 3.5}, "stop_token_ids": [2, 3], "seed": None}
    )
    assert params.logit_bias == {42: -100, 7: 3.5}
    assert params.stop_token_ids == (2, 3) and params.seed is None


@pytest.mark.parametrize(
    ("options", "field", "message"),
    [
        ({"temprature": 1}, "temprature", "is not a sampling parameter"),
        ({"logit_bias": {"a": 1}}, "logit_bias", "keys are token ids, got 'a'"),
        ({"stop_token_ids": 5}, "stop_token_ids", "must be a list"),
    ],
)
def test_it_refuses_options_it_does_not_know(options, field, message):
    with pytest.raises(InvalidSamplingParam, match=message) as raised:
        SamplingParams.from_options(options)
    assert raised.value.field == field


def test_it_refuses_token_ids_beyond_the_vocabulary():
    SamplingParams(logit_bias={99: 1}, stop_token_ids=(99,)).check_vocab(100)
    with pytest.raises(InvalidSamplingParam, match="names token id 100; the model's vocabulary has 100"):
        SamplingParams(logit_bias={100: 1}).check_vocab(100)
    with pytest.raises(InvalidSamplingParam) as raised:
        SamplingParams(stop_token_ids=(7, 500)).check_vocab(100)
    assert raised.value.field == "stop_token_ids"


def test_its_logit_bias_cannot_change_after_validation():
    bias = {1: 2.0}
    params = SamplingParams(logit_bias=bias)
    bias[1] = 500.0
    assert params.logit_bias == {1: 2.0}
    with pytest.raises(TypeError):
        params.logit_bias[1] = 500.0


def test_each_choice_of_n_gets_its_own_seed():
    params = SamplingParams(n=3, seed=10)
    assert [params.for_choice(i).seed for i in range(3)] == [10, 11, 12]
    assert params.for_choice(2).n == 1
    assert SamplingParams(n=2).for_choice(1).seed is None


def test_only_a_seeded_request_gets_a_generator():
    assert make_generator(SamplingParams()) is None
    assert isinstance(make_generator(SamplingParams(seed=-1)), torch.Generator)


# --- penalties and bias -------------------------------------------------------------------------------------------


def test_repetition_divides_positive_and_multiplies_negative_logits_of_seen_tokens():
    row = SamplingRow(SamplingParams(repetition_penalty=2.0), prompt_token_ids=[0], output_token_ids=[1, 1])
    out = processed_logits(logits_of([3.0, -1.0, 0.5, 2.0]), [row])
    assert out.tolist() == [[1.5, -2.0, 0.5, 2.0]]
    assert sample(logits_of([3.0, -1.0, 0.5, 2.0]), [SamplingRow(GREEDY)])[0].token_id == 0
    greedy_penalised = SamplingRow(
        SamplingParams(temperature=0, repetition_penalty=2.0), prompt_token_ids=[0], output_token_ids=[1]
    )
    assert sample(logits_of([3.0, -1.0, 0.5, 2.0]), [greedy_penalised])[0].token_id == 3


def test_frequency_counts_output_tokens_and_presence_counts_them_once():
    params = SamplingParams(frequency_penalty=0.5, presence_penalty=0.25)
    row = SamplingRow(params, prompt_token_ids=[3, 3, 4], output_token_ids=[1, 1, 2])
    out = processed_logits(torch.zeros(1, 5), [row])
    assert out.tolist() == [[0.0, -1.25, -0.75, 0.0, 0.0]]  # the prompt's tokens are not penalised


def test_logit_bias_is_added_and_can_force_or_ban_a_token():
    row = SamplingRow(SamplingParams(temperature=0, logit_bias={0: 5.0, 2: -100}))
    assert processed_logits(logits_of([1.0, 2.0, 3.0]), [row]).tolist() == [[6.0, 2.0, -97.0]]
    assert sample(logits_of([1.0, 2.0, 3.0]), [row])[0].token_id == 0
    banned = SamplingRow(SamplingParams(logit_bias={0: -100}), generator=make_generator(SamplingParams(seed=1)))
    draws = {sample(logits_of([5.0, 0.0]), [banned])[0].token_id for _ in range(200)}
    assert draws == {1}


def test_penalties_leave_the_callers_logits_alone():
    logits = logits_of([1.0, 2.0])
    processed_logits(logits, [SamplingRow(SamplingParams(logit_bias={0: 3}))])
    assert logits.tolist() == [[1.0, 2.0]]


# --- the distribution ---------------------------------------------------------------------------------------------


def approx(values):
    return pytest.approx(values, abs=1e-6)


def test_top_k_keeps_the_k_most_likely_renormalised():
    probs = distribution(probs_logits(0.5, 0.3, 0.15, 0.05), [SamplingParams(top_k=2)])
    assert probs[0].tolist() == approx([0.625, 0.375, 0.0, 0.0])


def test_top_p_keeps_the_smallest_set_reaching_it():
    logits = probs_logits(0.5, 0.3, 0.15, 0.05)
    assert distribution(logits, [SamplingParams(top_p=0.8)])[0].tolist() == approx([0.625, 0.375, 0, 0])
    assert distribution(logits, [SamplingParams(top_p=0.81)])[0].tolist() == approx(
        [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0]
    )
    assert distribution(logits, [SamplingParams(top_p=0.1)])[0].tolist() == approx([1, 0, 0, 0])


def test_top_p_applies_after_top_k():
    probs = distribution(probs_logits(0.4, 0.3, 0.2, 0.1), [SamplingParams(top_k=2, top_p=0.5)])
    assert probs[0].tolist() == approx([1, 0, 0, 0])  # within the top 2: 4/7 alone reaches 0.5


def test_min_p_drops_tokens_under_its_share_of_the_top():
    probs = distribution(probs_logits(0.5, 0.3, 0.15, 0.05), [SamplingParams(min_p=0.2)])
    assert probs[0].tolist() == approx([0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0])


def test_temperature_flattens_or_sharpens():
    logits = probs_logits(0.8, 0.2)
    assert distribution(logits, [SamplingParams(temperature=2.0)])[0].tolist() == approx([2 / 3, 1 / 3])
    assert distribution(logits, [SamplingParams(temperature=0.5)])[0].tolist() == approx([16 / 17, 1 / 17])


def test_each_row_keeps_its_own_truncation():
    logits = torch.cat([probs_logits(0.5, 0.3, 0.15, 0.05)] * 3)
    params = [SamplingParams(top_k=1), SamplingParams(), SamplingParams(top_p=0.8)]
    probs = distribution(logits, params)
    assert probs[0].tolist() == approx([1, 0, 0, 0])
    assert probs[1].tolist() == approx([0.5, 0.3, 0.15, 0.05])
    assert probs[2].tolist() == approx([0.625, 0.375, 0, 0])


# --- drawing ------------------------------------------------------------------------------------------------------


def test_greedy_takes_the_largest_logit_and_the_lowest_id_on_a_tie():
    rows = [SamplingRow(GREEDY), SamplingRow(GREEDY)]
    tokens = sample(logits_of([0.1, 0.9, 0.3], [2.0, 1.0, 2.0]), rows)
    assert [t.token_id for t in tokens] == [1, 0]


def test_it_never_draws_a_truncated_token():
    generator = torch.Generator().manual_seed(0)
    row = SamplingRow(SamplingParams(top_k=2))
    logits = probs_logits(0.3, 0.3, 0.2, 0.2)
    draws = {sample(logits, [row], generator)[0].token_id for _ in range(300)}
    assert draws == {0, 1}


def test_draws_follow_the_distribution():
    row = SamplingRow(SamplingParams(seed=5), generator=make_generator(SamplingParams(seed=5)))
    logits = probs_logits(0.6, 0.3, 0.1)
    counts = [0, 0, 0]
    for _ in range(3000):
        counts[sample(logits, [row])[0].token_id] += 1
    assert [c / 3000 for c in counts] == pytest.approx([0.6, 0.3, 0.1], abs=0.03)


def seeded_tokens(seed: int, logits: torch.Tensor, steps: int = 20, others: int = 0, position: int = 0) -> list[int]:
    """The tokens a seeded row draws over `steps` steps, batched with `others` unseeded and seeded rows."""
    params = SamplingParams(seed=seed, top_p=0.95)
    mine = SamplingRow(params, generator=make_generator(params))
    neighbours = [
        SamplingRow(SamplingParams(temperature=0.7), generator=None)
        if i % 2
        else SamplingRow(SamplingParams(seed=100 + i), generator=make_generator(SamplingParams(seed=100 + i)))
        for i in range(others)
    ]
    rows = neighbours[:position] + [mine] + neighbours[position:]
    batch = torch.cat([logits] * len(rows))
    unseeded = torch.Generator().manual_seed(seed + 1000)
    drawn = []
    for _ in range(steps):
        drawn.append(sample(batch, rows, unseeded)[position].token_id)
    return drawn


def test_a_seeded_request_draws_the_same_tokens_again():
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(1))
    assert seeded_tokens(7, logits) == seeded_tokens(7, logits)
    assert seeded_tokens(7, logits) != seeded_tokens(8, logits)


def test_a_seeded_requests_tokens_do_not_depend_on_the_rest_of_the_batch():
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(2))
    alone = seeded_tokens(7, logits)
    assert seeded_tokens(7, logits, others=3, position=0) == alone
    assert seeded_tokens(7, logits, others=5, position=2) == alone
    assert seeded_tokens(7, logits, others=8, position=8) == alone


# --- logprobs -----------------------------------------------------------------------------------------------------


def test_it_reports_the_chosen_tokens_logprob_and_the_top_alternatives():
    logits = probs_logits(0.5, 0.3, 0.2)
    (token,) = sample(logits, [SamplingRow(SamplingParams(temperature=0, logprobs=2))])
    assert token.token_id == 0
    assert token.logprob == pytest.approx(math.log(0.5), abs=1e-6)
    assert [t for t, _ in token.top_logprobs] == [0, 1]
    assert [lp for _, lp in token.top_logprobs] == approx([math.log(0.5), math.log(0.3)])


def test_logprobs_zero_gives_the_chosen_token_only_and_none_gives_nothing():
    logits = torch.cat([probs_logits(0.5, 0.5)] * 2)
    rows = [SamplingRow(SamplingParams(temperature=0, logprobs=0)), SamplingRow(GREEDY)]
    with_logprob, without = sample(logits, rows)
    assert with_logprob.logprob == pytest.approx(math.log(0.5), abs=1e-6) and with_logprob.top_logprobs == ()
    assert without == SampledToken(0)


def test_logprobs_are_the_models_own_before_penalties_and_temperature():
    logits = probs_logits(0.5, 0.3, 0.2)
    params = SamplingParams(temperature=0, logit_bias={2: 50}, logprobs=1)
    (token,) = sample(logits, [SamplingRow(params)])
    assert token.token_id == 2
    assert token.logprob == pytest.approx(math.log(0.2), abs=1e-6)
    assert token.top_logprobs[0][0] == 0


def test_it_refuses_logits_that_do_not_match_the_rows():
    with pytest.raises(ValueError, match=r"logits of shape \[2, 3\] for 1 rows"):
        sample(torch.zeros(2, 3), [SamplingRow(GREEDY)])
