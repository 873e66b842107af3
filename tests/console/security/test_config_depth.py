"""Nested JSON to the management API answers 400 naming the depth limit (issue 32, low): a body or a config nested
some thousand levels deep made /api/models/<m>/config/validate answer 500 (RecursionError in Python's parser)."""

from __future__ import annotations

import pytest

from console.registry.models import ModelVersion
from engine.config.text_format import MAX_JSON_DEPTH
from tests.console.registry import conftest as registry_cast
from tests.console.registry.conftest import model_file, upload, upload_config

pytestmark = pytest.mark.django_db

store, as_operator = registry_cast.store, registry_cast.as_operator
models_dir, simple_onnx = registry_cast.models_dir, registry_cast.simple_onnx

DEEP = "[" * 50_000 + "]" * 50_000
LIMIT = f"the JSON nests deeper than {MAX_JSON_DEPTH} levels"


@pytest.fixture(autouse=True)
def simple(as_operator, simple_onnx):
    as_operator.post("/api/models/", {"name": "simple"}, format="json")
    assert upload(as_operator, "simple", model_file(simple_onnx)).status_code == 201


@pytest.mark.parametrize("path", ["config/validate/", "config/", "traffic"])
def test_it_answers_a_body_nested_too_deep_with_400_naming_the_limit(as_operator, path):
    body = '{"format": "json", "text": ' + DEEP + "}"
    method = as_operator.put if path == "traffic" else as_operator.post
    answer = method(f"/api/models/simple/{path}", body, content_type="application/json")
    assert answer.status_code == 400, answer.content
    assert LIMIT in answer.json()["detail"]


def test_it_tells_a_config_nested_too_deep_from_a_valid_one(as_operator):
    text = '{"name": "simple", "parameters": ' + DEEP + "}"
    answer = as_operator.post("/api/models/simple/config/validate/", {"format": "json", "text": text}, format="json")
    assert answer.status_code == 200
    assert answer.json()["valid"] is False and LIMIT in answer.json()["errors"][0]
    saved = as_operator.post(
        "/api/models/simple/config/", {"format": "json", "text": text, "action": "new_version"}, format="json"
    )
    assert saved.status_code == 400 and LIMIT in saved.json()["detail"]


def test_it_refuses_an_upload_whose_json_config_nests_too_deep(as_operator):
    answer = upload_config(as_operator, "simple", '{"name": "simple", "parameters": ' + DEEP + "}")
    assert answer.status_code == 400, answer.content
    assert LIMIT in str(answer.json())
    assert ModelVersion.objects.filter(model__name="simple").count() == 1
