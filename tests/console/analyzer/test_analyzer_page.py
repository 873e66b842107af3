"""The model page's analyzer panel: everyone sees the analyses, managers get the form to start one."""

from __future__ import annotations

import pytest

from tests.console.accounts.conftest import signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def simple(as_operator):
    as_operator.post("/api/models/", {"name": "simple"}, format="json")


def test_it_gives_managers_the_form_to_start_an_analysis(operator):
    html = signed_in(operator).get("/models/simple/").content.decode()
    assert 'data-api="/api/models/simple/analyses/"' in html
    for control in ("analysis-form", "analysis-budget", "analysis-start", "analysis-cancel", "analysis-apply"):
        assert f'id="{control}"' in html
    assert "registry/analyzer.js" in html and "vendor/plotly.min.js" in html


def test_it_shows_viewers_the_analyses_without_the_controls(viewer):
    html = signed_in(viewer).get("/models/simple/").content.decode()
    assert 'id="analysis-rows"' in html and 'id="analysis-chart"' in html
    assert 'id="analysis-form"' not in html and 'id="analysis-apply"' not in html
