"""The models list and the audit log sort and filter by their query string, say when nothing matches, and the audit
log links its CSV with the same filters (console/registry/forms.py, views.py)."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from console.audit.models import AuditEvent
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from tests.console.accounts.conftest import signed_in

pytestmark = pytest.mark.django_db


def listed(html: str, attribute: str = "data-model") -> list[str]:
    return re.findall(rf'<tr {attribute}="([^"]+)"', html)


def model(name: str, state: str | None = None, versions: int = 1, **fields) -> RegisteredModel:
    registered = RegisteredModel.objects.create(name=name, **fields)
    for number in range(1, versions + 1):
        version = ModelVersion.objects.create(model=registered, number=number, state=state or VersionState.READY)
        if state is not None:
            registered.active_version = version
            registered.save()
    return registered


@pytest.fixture
def three_models():
    model("digits", VersionState.READY, versions=3, platform="onnxruntime_onnx", description="handwritten digits")
    model("simple", VersionState.FAILED, versions=1, platform="onnxruntime_onnx")
    model("texts", None, versions=0, backend="python", description="sorts words")


def test_the_models_list_sorts_by_a_column_header(viewer, three_models):
    client = signed_in(viewer)
    assert listed(client.get("/models/").content.decode()) == ["digits", "simple", "texts"]
    by_versions = client.get("/models/", {"sort": "-versions"}).content.decode()
    assert listed(by_versions) == ["digits", "simple", "texts"]
    assert listed(client.get("/models/", {"sort": "versions"}).content.decode()) == ["texts", "simple", "digits"]
    assert listed(client.get("/models/", {"sort": "-name"}).content.decode()) == ["texts", "simple", "digits"]
    assert 'aria-sort="descending"' in by_versions
    assert 'href="?sort=versions"' in by_versions  # a second click turns it around


def test_the_models_list_filters_by_word_state_and_platform(viewer, three_models):
    client = signed_in(viewer)
    assert listed(client.get("/models/", {"q": "WORDS"}).content.decode()) == ["texts"]
    assert listed(client.get("/models/", {"state": "FAILED"}).content.decode()) == ["simple"]
    assert listed(client.get("/models/", {"state": "none"}).content.decode()) == ["texts"]
    assert listed(client.get("/models/", {"platform": "python"}).content.decode()) == ["texts"]
    html = client.get("/models/", {"q": "digits", "sort": "-name"}).content.decode()
    assert 'href="?q=digits&amp;sort=name"' in html  # the filter kept in the headers' links


def test_the_models_list_says_when_nothing_matches_and_when_nothing_is_there(viewer, three_models):
    client = signed_in(viewer)
    assert "No model matches these filters." in client.get("/models/", {"q": "zzz"}).content.decode()
    assert "Select a valid choice" not in client.get("/models/", {"state": "BOGUS"}).content.decode()
    assert listed(client.get("/models/", {"state": "BOGUS"}).content.decode()) == []
    RegisteredModel.objects.all().delete()
    assert "No model is registered yet." in client.get("/models/").content.decode()


def test_the_models_list_shows_no_server_path_in_descriptions(viewer):
    model("imported", description="imported from /home/ada/repository")
    html = signed_in(viewer).get("/models/").content.decode()
    assert "/home/ada" not in html and "imported from …/repository" in html


def event(actor: str, action: str, obj: str, day: dt.date) -> AuditEvent:
    recorded = AuditEvent.record(actor, action, obj)
    AuditEvent.objects.filter(pk=recorded.pk).update(created_at=dt.datetime.combine(day, dt.time(12), tzinfo=dt.UTC))
    return recorded


@pytest.fixture
def trail():
    event("ada", "model.register", "digits", dt.date(2026, 3, 1))
    event("", "version.load", "digits/1", dt.date(2026, 3, 2))
    event("otto", "version.activate", "digits/1", dt.date(2026, 3, 3))
    event("otto", "model.register", "simple", dt.date(2026, 3, 4))


def audit_rows(html: str) -> list[tuple[str, str, str]]:
    body = html.split("<tbody>", 1)[1]
    cells = re.findall(
        r"<tr>\s*<td><time[^>]*>[^<]*</time></td>\s*<td>([^<]*)</td>"
        r'\s*<td>[^<]*<code class="action-code">([^<]*)</code></td>\s*<td>([^<]*)</td>',
        body,
    )
    return [tuple(cell) for cell in cells]


def test_the_audit_log_filters_by_actor_action_and_days(viewer, trail):
    client = signed_in(viewer)
    assert audit_rows(client.get("/audit/", {"actor": "otto"}).content.decode()) == [
        ("otto", "model.register", "simple"),
        ("otto", "version.activate", "digits/1"),
    ]
    assert audit_rows(client.get("/audit/", {"actor": "system"}).content.decode()) == [
        ("system", "version.load", "digits/1")
    ]
    assert audit_rows(client.get("/audit/", {"action": "model.register"}).content.decode())[1] == (
        "ada",
        "model.register",
        "digits",
    )
    days = client.get("/audit/", {"since": "2026-03-02", "until": "2026-03-03"}).content.decode()
    assert [row[1] for row in audit_rows(days)] == ["version.activate", "version.load"]


def test_the_audit_log_sorts_by_a_column_header(viewer, trail):
    client = signed_in(viewer)
    oldest_first = audit_rows(client.get("/audit/", {"sort": "time"}).content.decode())
    assert [row[2] for row in oldest_first] == ["digits", "digits/1", "digits/1", "simple"]
    by_actor = audit_rows(client.get("/audit/", {"sort": "actor"}).content.decode())
    assert [row[0] for row in by_actor] == ["system", "ada", "otto", "otto"]  # the system's name is empty


def test_the_audit_log_explains_a_bad_filter_and_an_empty_result(viewer, trail):
    client = signed_in(viewer)
    bad = client.get("/audit/", {"since": "March"}).content.decode()
    assert 'role="alert"' in bad and "since" in bad
    later = client.get("/audit/", {"since": "2026-03-04", "until": "2026-03-01"}).content.decode()
    assert "&#x27;To&#x27; is before &#x27;From&#x27;" in later
    assert "No event matches these filters." in client.get("/audit/", {"model": "nope"}).content.decode()


def test_the_audit_log_links_its_csv_with_the_same_filters(viewer, trail):
    html = signed_in(viewer).get("/audit/", {"actor": "otto", "sort": "action", "page": "1"}).content.decode()
    link = re.search(r'<a href="([^"]+)" id="audit-csv"', html).group(1).replace("&amp;", "&")
    assert link == "/api/audit/?actor=otto&sort=action&format=csv"
