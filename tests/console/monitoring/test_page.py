"""/monitoring/: signed-in console roles only; the charts' containers, controls and scripts (served locally)."""

from __future__ import annotations

import re

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model

from console.accounts.roles import set_role
from console.monitoring.views import monitoring
from console.runtime_of import RUNTIME_KEY

pytestmark = pytest.mark.django_db

CHARTS = ("throughput", "latency", "queue-compute", "batch-sizes", "devices", "pending")


def user_with(role: str):
    user = get_user_model().objects.create_user(f"user-{role}", password="pw-for-tests-123")
    set_role(user, role)
    return user


def signed_in(client, role: str):
    client.force_login(user_with(role))
    return client


def test_it_sends_anonymous_visitors_to_sign_in(client):
    response = client.get("/monitoring/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/monitoring/")


def test_it_refuses_inference_only_users(client):
    # an inference account has no console session at all: it is sent to sign in, where its password is refused
    response = signed_in(client, "inference").get("/monitoring/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_it_opens_split_by_version_when_the_link_asks(client):
    html = signed_in(client, "viewer").get("/monitoring/", {"split": "versions"}).content.decode()
    assert 'id="split-versions" checked' in html


def test_it_shows_every_chart_the_controls_and_the_connection_state(client):
    html = signed_in(client, "viewer").get("/monitoring/").content.decode()
    for chart in CHARTS:
        assert f'id="chart-{chart}"' in html
    for window in ("60", "300", "900"):
        assert f'<option value="{window}"' in html
    assert 'id="model-select"' in html and 'id="connection-state"' in html
    assert 'id="split-versions"' in html
    assert "No GPU on this machine" in html  # shown by the page script when snapshots carry no GPU
    assert 'data-ws-path="/ws/metrics/"' in html


@pytest.mark.django_db(transaction=True)
async def test_it_lists_ensembles_as_pipelines_and_selects_the_linked_one(ensemble, rf):
    request = rf.get("/monitoring/", {"model": "pair"})
    request.user = await sync_to_async(user_with)("viewer")
    request.scope = {RUNTIME_KEY: ensemble.runtime}
    html = (await sync_to_async(monitoring)(request)).content.decode()
    pipelines = re.search(r'<optgroup label="Pipelines[^"]*" id="pipeline-options">(.*?)</optgroup>', html, re.S)
    assert re.findall(r'<option value="(\w+)"', pipelines.group(1)) == ["pair"]
    assert '<option value="pair" selected>' in html
    models = re.search(r'<optgroup label="Models" id="model-options">(.*?)</optgroup>', html, re.S)
    assert re.findall(r'<option value="(\w+)"', models.group(1)) == ["first", "second"]
    assert 'id="pipeline-panel" hidden' in html  # shown by the page script once the stream describes the pipeline
    for chart in ("throughput", "latency", "queue-compute", "time"):
        assert f'id="chart-pipeline-{chart}"' in html


@pytest.mark.parametrize(
    "path",
    [
        "/static/vendor/plotly.min.js",
        "/static/monitoring/live.js",
        "/static/monitoring/charts.js",
        "/static/monitoring/pipeline.js",
        "/static/monitoring/monitoring.js",
    ],
)
def test_it_serves_its_scripts_from_this_server(client, path):
    html = signed_in(client, "viewer").get("/monitoring/").content.decode()
    assert f'src="{path}"' in html
    response = client.get(path)
    assert response.status_code == 200
    assert int(response["Content-Length"]) > 1000
