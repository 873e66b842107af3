"""GET /api/audit/: every management action, newest first, filterable."""

from __future__ import annotations

import pytest

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
