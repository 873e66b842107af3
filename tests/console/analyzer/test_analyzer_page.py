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


def test_it_labels_its_figures_as_the_engines_in_process_ones(viewer):
    """64k infer/s in process is not what an HTTP caller gets: the panel says so and links to the measured figures."""
    html = signed_in(viewer).get("/models/simple/").content.decode()
    assert "<strong>In-process engine figures.</strong>" in html
    assert "callers over\n    HTTP or gRPC get less" in html
    assert '<a href="/docs/benchmarks.md">docs/benchmarks.md</a>' in html
    assert "Throughput (infer/s, in process)" in html


def test_it_serves_the_benchmarks_it_links_to_to_signed_in_users(client, viewer):
    answer = signed_in(viewer).get("/docs/benchmarks.md")
    assert answer.status_code == 200
    assert answer["Content-Type"] == "text/plain; charset=utf-8"
    assert b"## HTTP: throughput and latency" in b"".join(answer.streaming_content)
    assert client.get("/docs/benchmarks.md").status_code == 302  # to the sign-in page
