"""GET /api/audit/: every management action, newest first, filterable."""

from __future__ import annotations

import pytest

from console.audit.models import AuditEvent
from tests.console.registry.conftest import model_file, upload

pytestmark = pytest.mark.django_db


def test_it_lists_every_action_newest_first_and_filters(as_operator, as_viewer, simple_onnx):
    as_operator.post("/api/models/", {"name": "simple"}, format="json")
    as_operator.post("/api/models/", {"name": "other"}, format="json")
    upload(as_operator, "simple", model_file(simple_onnx), notes="v1")
    as_operator.patch("/api/models/other/", {"description": "d"}, format="json")

    answer = as_viewer.get("/api/audit/")
    assert answer.status_code == 200
    rows = [(e["actor"], e["action"], e["object"]) for e in answer.json()["results"]]
    assert rows == [
        ("otto", "model.update", "other"),
        ("otto", "version.activate", "simple/1"),
        ("otto", "version.upload", "simple/1"),
        ("otto", "model.register", "other"),
        ("otto", "model.register", "simple"),
    ]
    assert answer.json()["count"] == 5

    on_simple = as_viewer.get("/api/audit/", {"model": "simple"}).json()["results"]
    assert {e["object"] for e in on_simple} == {"simple", "simple/1"}
    uploads = as_viewer.get("/api/audit/", {"action": "version.upload"}).json()["results"]
    assert uploads[0]["detail"]["notes"] == "v1"
    assert as_viewer.get("/api/audit/", {"actor": "nobody"}).json()["count"] == 0
    assert len(as_viewer.get("/api/audit/", {"limit": 2}).json()["results"]) == 2


def test_it_exports_every_matching_event_as_csv(as_viewer):
    for number in range(150):  # more than a page of JSON: the CSV holds them all
        AuditEvent.record("ada", "version.load", f"simple/{number}", reason="=HYPERLINK(1)")
    AuditEvent.record("otto", "model.register", "other")
    answer = as_viewer.get("/api/audit/", {"actor": "ada", "sort": "time", "format": "csv"})
    assert answer.status_code == 200
    assert answer["Content-Type"].startswith("text/csv")
    assert 'filename="infera-audit.csv"' in answer["Content-Disposition"]
    lines = b"".join(answer.streaming_content).decode().splitlines()
    assert lines[0] == "time_utc,actor,action,object,detail"
    assert len(lines) == 151
    assert lines[1].split(",")[1:4] == ["ada", "version.load", "simple/0"]
    assert lines[1].endswith('"{""reason"": ""=HYPERLINK(1)""}"')  # JSON starts with a brace: no formula


def test_it_keeps_spreadsheet_formulas_inert_in_the_csv(as_viewer):
    AuditEvent.record("=cmd|' /C calc'!A0", "model.register", "+sum")
    rows = b"".join(as_viewer.get("/api/audit/", {"format": "csv"}).streaming_content).decode().splitlines()
    assert rows[1].split(",", 1)[1].startswith("'=cmd")
    assert ",'+sum," in rows[1]


def test_it_refuses_a_filter_it_cannot_read(as_viewer):
    answer = as_viewer.get("/api/audit/", {"since": "yesterday"})
    assert answer.status_code == 400
    assert "since" in answer.json()
    assert as_viewer.get("/api/audit/", {"actor": "a\x00b"}).status_code == 400
