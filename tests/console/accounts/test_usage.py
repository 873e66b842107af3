"""Token usage over time: the engine's minute buckets added to one row per minute and caller (every replica adding to
it), kept through a database outage, pruned after a month; /api/usage/ gives the chart its bars by user, by a user's
tokens or by a token's kinds, the biggest eight and "others", and says why a chart is empty; admins only."""

from __future__ import annotations

import asyncio

import pytest
from django.db import OperationalError

from console.accounts.models import UsageMinute
from console.accounts.tokens import issue_token
from console.accounts.usage import UsageRecorder, prune, record
from engine.llm.usage import Usage, UsageLedger
from engine.llm.usage import UsageMinute as Bucket
from tests.console.accounts.conftest import api_client_for, make_user, signed_in

NOW = 6000 * 60.0 + 30  # half-way through minute 6000
MINUTE = 6000


def rows() -> list[tuple]:
    fields = ("minute", "user_id", "user_name", "token_id", "prompt", "completion", "cached")
    return list(UsageMinute.objects.order_by("minute", "user_id", "token_id").values_list(*fields))


@pytest.mark.django_db
def test_it_adds_every_replicas_minute_to_one_row_per_caller():
    record(
        [Bucket(MINUTE, "ingo", 3, 7, prompt=10, completion=4, cached=2), Bucket(MINUTE, "anonymous", None, None, 5)]
    )
    record([Bucket(MINUTE, "ingo", 3, 7, prompt=1, completion=1)])  # another replica's count of the same minute
    assert rows() == [(MINUTE, 0, "anonymous", 0, 5, 0, 0), (MINUTE, 3, "ingo", 7, 11, 5, 2)]


@pytest.mark.django_db
def test_it_prunes_rows_older_than_a_month():
    record([Bucket(MINUTE - 32 * 24 * 60, "ingo", 3, 7, prompt=1), Bucket(MINUTE, "ingo", 3, 7, prompt=2)])
    assert prune(now=NOW) == 1
    assert [row[0] for row in rows()] == [MINUTE]


@pytest.mark.django_db(transaction=True)
def test_the_recorder_keeps_what_the_database_refused_and_writes_it_next_time(monkeypatch):
    ledger = UsageLedger(clock=lambda: NOW)
    recorder = UsageRecorder(ledger)
    ledger.count("ingo", Usage(prompt=6, completion=2), token=7, user_id=3)

    def down(buckets):
        raise OperationalError("the database is down")

    monkeypatch.setattr("console.accounts.usage.record", down)
    asyncio.run(recorder.write())
    assert rows() == [] and len(recorder.unwritten) == 1
    monkeypatch.undo()
    ledger.count("ingo", Usage(prompt=1), token=7, user_id=3)
    asyncio.run(recorder.stop())  # a stop writes what is left
    assert rows() == [(MINUTE, 3, "ingo", 7, 7, 2, 0)] and recorder.unwritten == []


@pytest.fixture
def usage(admin, inference):
    """ingo used tokens with two tokens and a session in the last hour; eleven other users one token each."""
    script, _ = issue_token(inference, "script")
    batch, _ = issue_token(inference, "batch")
    buckets = [
        Bucket(MINUTE, "ingo", inference.pk, script.pk, prompt=100, completion=20, cached=40),
        Bucket(MINUTE - 1, "ingo", inference.pk, batch.pk, prompt=10, completion=5),
        Bucket(MINUTE - 59, "ingo", inference.pk, None, prompt=3),
        Bucket(MINUTE - 60, "ingo", inference.pk, script.pk, prompt=999),  # an hour ago: outside the last hour
    ]
    for index in range(11):
        other = make_user(f"user{index:02}", None)
        buckets.append(Bucket(MINUTE, other.username, other.pk, None, prompt=index + 1))
    record(buckets)
    return {"script": script, "batch": batch}


def chart(caller, **query) -> dict:
    answer = api_client_for(caller).get("/api/usage/", query)
    assert answer.status_code == 200, answer.content
    return answer.json()


def test_it_charts_the_biggest_eight_users_and_the_rest_as_others(admin, usage, monkeypatch):
    monkeypatch.setattr("console.accounts.usage_chart.clock", lambda: NOW)
    answer = chart(admin)
    assert answer["by"] == "user" and answer["unit"] == "tokens per minute" and answer["empty"] is None
    assert len(answer["times"]) == 60 and answer["times"][-1] == MINUTE * 60_000
    names = [series["name"] for series in answer["series"]]
    assert names[:2] == ["ingo", "user10"] and names[-1] == "others (4 more)" and len(names) == 9
    ingo = answer["series"][0]
    assert ingo["total"] == 120 + 15 + 3 and ingo["values"][-1] == 120 and ingo["values"][0] == 3
    assert answer["series"][-1]["total"] == 1 + 2 + 3 + 4  # user00 to user03
    assert answer["totals"] == {"prompt": 113 + 66, "completion": 25, "cached": 40}
    completion = chart(admin, kind="completion")
    assert [series["name"] for series in completion["series"]] == ["ingo"]


def test_it_charts_a_users_tokens_and_a_tokens_kinds(admin, inference, usage, monkeypatch):
    monkeypatch.setattr("console.accounts.usage_chart.clock", lambda: NOW)
    by_token = chart(admin, user=inference.pk)
    assert [(s["name"], s["total"]) for s in by_token["series"]] == [
        ("token 'script'", 120),
        ("token 'batch'", 15),
        ("signed-in sessions (no token)", 3),
    ]
    by_kind = chart(admin, token=usage["script"].pk, span="day")
    assert by_kind["unit"] == "tokens per 15 minutes" and len(by_kind["times"]) == 96
    assert {s["name"]: s["total"] for s in by_kind["series"]} == {
        "prompt": 1099,  # the day holds the minute an hour ago
        "completion": 20,
        "cached (part of the prompt)": 40,
    }
    assert by_kind["series"][0]["values"][-1] == 100  # minute 6000 opens the day's last 15-minute bar


@pytest.mark.django_db
def test_an_empty_chart_says_why(admin, inference, monkeypatch):
    monkeypatch.setattr("console.accounts.usage_chart.clock", lambda: NOW)
    assert "No token usage recorded yet" in chart(admin)["empty"]
    record([Bucket(MINUTE - 2 * 24 * 60, "ingo", inference.pk, None, prompt=5)])
    assert chart(admin, user=inference.pk)["empty"] == "No tokens used by 'ingo' in the last hour."
    assert chart(admin, user=inference.pk, span="day")["empty"] == "No tokens used by 'ingo' in the last 24 hours."
    assert chart(admin, user=inference.pk, span="week")["empty"] is None


@pytest.mark.django_db
def test_only_admins_read_usage_and_a_bad_query_is_a_400(admin, operator):
    assert api_client_for(operator).get("/api/usage/").status_code == 403
    assert api_client_for(admin).get("/api/usage/", {"span": "year"}).status_code == 400
    assert api_client_for(admin).get("/api/usage/", {"token": 999}).status_code == 404


def test_the_users_page_a_users_page_and_a_tokens_page_show_the_chart(admin, inference, usage):
    client = signed_in(admin)
    for path, query in [
        ("/users/", 'data-query=""'),
        (f"/users/{inference.pk}/", f'data-query="user={inference.pk}"'),
        (f"/users/{inference.pk}/tokens/{usage['script'].pk}/", f'data-query="token={usage["script"].pk}"'),
    ]:
        page = client.get(path).content.decode()
        assert 'id="usage-chart"' in page and query in page and "accounts/usage.js" in page, path
