"""The model page's config editor panel: its API hooks for everyone, its save buttons for managers only."""

from __future__ import annotations

import pytest

from tests.console.accounts.conftest import signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def simple(as_operator):
    as_operator.post("/api/models/", {"name": "simple"}, format="json")


def test_it_gives_managers_the_editor_with_its_save_buttons(operator):
    html = signed_in(operator).get("/models/simple/").content.decode()
    assert 'data-api="/api/models/simple/config"' in html
    assert 'data-validate="/api/models/simple/config/validate"' in html
    for control in ("config-text", "config-save-new", "config-apply", "knob-max-batch-size", "knob-instance-kind"):
        assert f'id="{control}"' in html
    assert "registry/config_editor.js" in html and "registry/tuning.css" in html


def test_it_shows_viewers_the_config_without_save_buttons(viewer):
    html = signed_in(viewer).get("/models/simple/").content.decode()
    assert 'id="config-text"' in html and "readonly" in html
    assert 'id="config-save-new"' not in html and 'id="config-apply"' not in html
