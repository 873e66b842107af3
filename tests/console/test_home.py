"""The home page (console/views.py): the overview for console roles, the engine's state alone for anyone else."""

from __future__ import annotations

import re

import pytest

from console.registry.models import ModelVersion, RegisteredModel, VersionState
from tests.console.accounts import conftest as accounts_cast
from tests.console.accounts.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db

viewer = accounts_cast.viewer  # the accounts tests' cast


def test_it_shows_the_overview_to_a_viewer(viewer):
    failed = RegisteredModel.objects.create(name="broken", description="a model that cannot load")
    ModelVersion.objects.create(model=failed, number=1, state=VersionState.FAILED, should_load=True, error="bad ONNX")
    html = signed_in(viewer).get("/").content.decode()
    for part in ("overview-models", "overview-figures", "overview-devices", "overview-audit", "model-cards"):
        assert f'id="{part}"' in html
    assert 'id="overview-attention"' in html and "version 1: bad ONNX" in html
    assert 'data-sparkline="broken"' in html
    assert "console/overview.js" in html and "vendor/plotly.min.js" in html
    assert re.findall(r"(?:src|href)=\"(https?://[^\"]+)\"", html) == []


def test_it_says_what_is_empty(viewer):
    html = signed_in(viewer).get("/").content.decode()
    assert "No model yet." in html
    assert "Nothing has changed yet" in html
    assert 'id="overview-attention"' in html and "hidden" in re.search(
        r'<section[^>]+id="overview-attention"[^>]*>', html.replace("\n", " ")
    ).group(0)


def test_it_shows_only_the_engine_state_to_an_account_without_a_console_role():
    html = signed_in(make_user("nobody", None)).get("/").content.decode()
    assert 'id="engine-state"' in html
    assert "no console role" in html
    assert 'id="model-cards"' not in html
