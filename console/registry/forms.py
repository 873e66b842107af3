"""The filters of the registry's lists: the models list and the audit log (its page, its API and its CSV export).

Each form reads a query string and narrows a queryset; its choices come from what the database holds. A filter
that cannot be read (a bad date, a NUL that PostgreSQL cannot hold) is an error on the form, never a server error.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.db.models import Case, Count, F, Q, QuerySet, When

from console.audit.models import AuditEvent
from console.listing import Column
from console.registry.models import RegisteredModel, VersionState

NO_ACTIVE_VERSION = "none"

MODEL_COLUMNS = (
    Column("name", "Model"),
    Column("state", "State"),
    Column("active", "Active"),
    Column("serving", "Serving", sortable=False),  # what this process's engine serves: live, not in the database
    Column("versions", "Versions"),
    Column("throughput", "Throughput", sortable=False),  # live
    Column("platform", "Platform"),
    Column("description", "Description"),
)
MODEL_ORDER = {
    "name": ("name",),
    "state": ("active_version__state", "name"),
    "active": ("active_version__number", "name"),
    "versions": ("version_count", "name"),
    "platform": ("shown_platform", "name"),
    "description": ("description", "name"),
}

AUDIT_COLUMNS = (
    Column("time", "Time (UTC)"),
    Column("actor", "Actor"),
    Column("action", "Action"),
    Column("object", "Object"),
    Column("detail", "Detail", sortable=False),
)
AUDIT_ORDER = {
    "time": ("created_at", "id"),
    "actor": ("actor_name", "-created_at", "-id"),
    "action": ("action", "-created_at", "-id"),
    "object": ("object", "-created_at", "-id"),
}


def _choices(values: Any, anything: str) -> list[tuple[str, str]]:
    return [("", anything), *((value, value) for value in values if value)]


class ModelFilterForm(forms.Form):
    """The models list narrowed by a word of the name or description, the active version's state, the platform."""

    q = forms.CharField(required=False, max_length=200, label="Name or description")
    state = forms.ChoiceField(required=False, label="State")
    platform = forms.ChoiceField(required=False, label="Platform")

    def __init__(self, data: Any = None, models: QuerySet[RegisteredModel] | None = None) -> None:
        super().__init__(data)
        self.fields["state"].choices = [
            ("", "any state"),
            *((state.value, state.value) for state in VersionState),
            (NO_ACTIVE_VERSION, "no active version"),
        ]
        models = models if models is not None else RegisteredModel.objects.all()
        platforms = sorted(set(with_platform(models).values_list("shown_platform", flat=True)))
        self.fields["platform"].choices = _choices(platforms, "any platform")

    @property
    def active(self) -> bool:
        """Whether any filter is set (the page then says "no model matches" rather than "no model yet")."""
        return self.is_bound and any(self.data.get(name) for name in self.fields)

    def apply(self, models: QuerySet[RegisteredModel]) -> QuerySet[RegisteredModel]:
        """`models` narrowed by the valid filters, each with `version_count` and `shown_platform`."""
        models = with_platform(models).annotate(version_count=Count("versions"))
        if not self.is_valid():
            return models.none()
        data = self.cleaned_data
        if data["q"]:
            models = models.filter(Q(name__icontains=data["q"]) | Q(description__icontains=data["q"]))
        if data["state"] == NO_ACTIVE_VERSION:
            models = models.filter(active_version__isnull=True)
        elif data["state"]:
            models = models.filter(active_version__state=data["state"])
        if data["platform"]:
            models = models.filter(shown_platform=data["platform"])
        return models


def with_platform(models: QuerySet[RegisteredModel]) -> QuerySet[RegisteredModel]:
    """`models` with `shown_platform`: the platform, else the backend (what the list shows)."""
    return models.annotate(shown_platform=Case(When(platform="", then=F("backend")), default=F("platform")))


class DateInput(forms.DateInput):
    input_type = "date"


class AuditFilterForm(forms.Form):
    """The audit trail narrowed by model (and its versions), action, actor and a range of days (UTC, inclusive)."""

    model = forms.CharField(required=False, max_length=256, label="Model")
    action = forms.CharField(required=False, max_length=64, label="Action")
    actor = forms.CharField(required=False, max_length=150, label="Actor")
    since = forms.DateField(required=False, label="From", widget=DateInput, input_formats=["%Y-%m-%d"])
    until = forms.DateField(required=False, label="To", widget=DateInput, input_formats=["%Y-%m-%d"])

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            self.add_error("until", "'To' is before 'From'")
        return data

    @property
    def active(self) -> bool:
        return self.is_bound and any(self.data.get(name) for name in self.fields)

    def actions(self) -> list[str]:
        """Every action recorded so far (the page's choices)."""
        return sorted(set(AuditEvent.objects.values_list("action", flat=True)))

    def actors(self) -> list[str]:
        """Everyone who did something so far; the system (the reconciler) as 'system'."""
        names = set(AuditEvent.objects.values_list("actor_name", flat=True))
        return sorted({name or "system" for name in names})

    def apply(self, events: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
        """`events` narrowed by the valid filters; an invalid form matches nothing."""
        if not self.is_valid():
            return events.none()
        data = self.cleaned_data
        if data["model"]:
            events = events.filter(Q(object=data["model"]) | Q(object__startswith=f"{data['model']}/"))
        if data["action"]:
            events = events.filter(action=data["action"])
        if data["actor"] == "system":  # how the page names the reconciler's and other unattended changes
            events = events.filter(actor_name__in=("", "system"))
        elif data["actor"]:
            events = events.filter(actor_name=data["actor"])
        if data["since"]:
            events = events.filter(created_at__gte=_day_start(data["since"]))
        if data["until"]:
            events = events.filter(created_at__lt=_day_start(data["until"] + dt.timedelta(days=1)))
        return events


def _day_start(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time.min, tzinfo=dt.UTC)
