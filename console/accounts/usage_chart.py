"""The token usage chart's data (admins): /api/usage/, read by the users page, a user's page and a token's page.

`?span=` hour (a bar a minute), day (a bar per 15 minutes) or week (a bar an hour) up to now. Without a selection the
series are the users; with `?user=<id>` that user's tokens (a signed-in session's requests as one more); with
`?token=<id>` the token's prompt, completion and cached tokens. `?kind=` (total: prompt and completion, or prompt,
completion, cached) says what a user's or a token's series count. As every console chart, at most TOP series are
drawn, the biggest over the span, the rest summed as "others"; an empty chart says why.
"""

from __future__ import annotations

import time
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import BigIntegerField, ExpressionWrapper, F, Sum
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from console.accounts.api import AccountsApi
from console.accounts.models import ApiToken, UsageMinute
from console.accounts.permissions import IsAdmin

SPANS = {"hour": (60, 1), "day": (24 * 60, 15), "week": (7 * 24 * 60, 60)}  # minutes shown, minutes a bar
SPAN_WORDS = {"hour": "the last hour", "day": "the last 24 hours", "week": "the last 7 days"}
UNITS = {1: "tokens per minute", 15: "tokens per 15 minutes", 60: "tokens per hour"}
KINDS = ("total", "prompt", "completion", "cached")
TOP = 8
clock = time.time  # the chart's "now" (tests set it)
NOTHING_YET = (
    "No token usage recorded yet: a /v1 completion or embedding, or a generate request, counts here a few seconds "
    "after it ends."
)


def usage_chart(
    span: str = "hour",
    *,
    user: Any = None,
    token: ApiToken | None = None,
    kind: str = "total",
    now: float | None = None,
) -> dict[str, Any]:
    """The bars of `span` up to `now`, by user (no selection), by token (`user`) or by kind (`token`)."""
    shown, width = SPANS[span]
    last = int((clock() if now is None else now) // 60) // width
    first = last - shown // width + 1
    rows = UsageMinute.objects.filter(minute__gte=first * width, minute__lt=(last + 1) * width)
    if token is not None:
        rows, by = rows.filter(token_id=token.pk), "kind"
    elif user is not None:
        rows, by = rows.filter(user_id=user.pk), "token"
    else:
        by = "user"
    bar = ExpressionWrapper(F("minute") / width, output_field=BigIntegerField())
    key = {"user": "user_id", "token": "token_id", "kind": "user_id"}[by]  # nosec B105 - column names
    grouped = rows.annotate(bar=bar).values(key, "bar").annotate(p=Sum("prompt"), c=Sum("completion"), k=Sum("cached"))
    values: dict[str, list[int]] = {}
    totals = dict.fromkeys(("prompt", "completion", "cached"), 0)
    for row in grouped:
        amounts = {"prompt": row["p"], "completion": row["c"], "cached": row["k"]}
        for name, amount in amounts.items():
            totals[name] += amount
        counted = amounts if by == "kind" else {f"{by}:{row[key]}": _kind_of(amounts, kind)}
        for series, amount in counted.items():
            values.setdefault(series, [0] * (last - first + 1))[row["bar"] - first] += amount
    series = _top([{"key": k, "values": v, "total": sum(v)} for k, v in values.items() if any(v)])
    _name(series, by)
    return {
        "span": span,
        "by": by,
        "kind": "each" if by == "kind" else kind,
        "unit": UNITS[width],
        "times": [bar * width * 60_000 for bar in range(first, last + 1)],  # each bar's start, ms since the epoch
        "series": series,
        "totals": totals,
        "empty": None if series else _why_empty(span, user, token),
    }


def _kind_of(amounts: dict[str, int], kind: str) -> int:
    return amounts["prompt"] + amounts["completion"] if kind == "total" else amounts[kind]


def _top(series: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The TOP biggest series over the span, the rest summed as one "others"."""
    series.sort(key=lambda s: (-s["total"], s["key"]))
    if len(series) <= TOP + 1:
        return series
    rest = series[TOP:]
    others = [sum(column) for column in zip(*(s["values"] for s in rest), strict=True)]
    return [*series[:TOP], {"key": "others", "values": others, "total": sum(others), "count": len(rest)}]


def _name(series: list[dict[str, Any]], by: str) -> None:
    """Each series' name as a person reads it."""
    ids = [int(s["key"].partition(":")[2]) for s in series if s["key"].startswith(f"{by}:")]
    if by == "user":
        names = dict(UsageMinute.objects.filter(user_id__in=ids).values_list("user_id", "user_name").distinct())
        live = dict(get_user_model().objects.filter(pk__in=ids).values_list("pk", "username"))
        names.update(live)
        names[0] = "anonymous callers"
    elif by == "token":
        names = {pk: f"token '{name}'" for pk, name in ApiToken.objects.filter(pk__in=ids).values_list("pk", "name")}
        names[0] = "signed-in sessions (no token)"
    for entry in series:
        kind, _, ident = entry["key"].partition(":")
        if entry["key"] == "others":
            entry["name"] = f"others ({entry['count']} more)"
        elif by == "kind":
            entry["name"] = "cached (part of the prompt)" if kind == "cached" else kind
        else:
            entry["name"] = names.get(int(ident), f"{by} #{ident} (deleted)")


def _why_empty(span: str, user: Any, token: ApiToken | None) -> str:
    if not UsageMinute.objects.exists():
        return NOTHING_YET
    who = f"token '{token.name}'" if token is not None else f"'{user.get_username()}'" if user is not None else "anyone"
    return f"No tokens used by {who} in {SPAN_WORDS[span]}."


class UsageQuery(serializers.Serializer):
    span = serializers.ChoiceField(choices=list(SPANS), default="hour")
    kind = serializers.ChoiceField(choices=list(KINDS), default="total")
    user = serializers.IntegerField(min_value=1, max_value=2**63 - 1, required=False)
    token = serializers.IntegerField(min_value=1, max_value=2**63 - 1, required=False)


class UsageApi(AccountsApi):
    """Tokens used over time, by user, by one user's tokens, or by kind for one token (admins)."""

    permission_classes = [IsAdmin]
    serializer_class = UsageQuery

    @extend_schema(
        parameters=[
            OpenApiParameter("span", str, enum=list(SPANS), description="hour, day or week up to now"),
            OpenApiParameter("kind", str, enum=list(KINDS), description="what a user's or token's series count"),
            OpenApiParameter("user", int, description="one user's tokens"),
            OpenApiParameter("token", int, description="one token's prompt, completion and cached tokens"),
        ],
        responses=dict,
    )
    def get(self, request: Request) -> Response:
        query = UsageQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        asked = query.validated_data
        user = token = None
        if "token" in asked:
            token = ApiToken.objects.filter(pk=asked["token"]).first()
            if token is None:
                return Response({"detail": f"no API token has id {asked['token']}"}, status=404)
        elif "user" in asked:
            user = get_user_model().objects.filter(pk=asked["user"]).first()
            if user is None:
                return Response({"detail": f"no user has id {asked['user']}"}, status=404)
        return Response(usage_chart(asked["span"], user=user, token=token, kind=asked["kind"]))
