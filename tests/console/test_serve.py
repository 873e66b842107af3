"""`manage.py serve` as a person runs it: a real process on a loopback port, with uvicorn and with daphne."""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import pytest

from console.demo.repository import digits_split
from tests.conftest import REPO_ROOT, ServerProcess, serve_process

pytestmark = pytest.mark.server

ENGINE_MISSING = (
    None if (REPO_ROOT / "engine" / "serving" / "server.py").exists() else "engine/serving/server.py has not landed yet"
)


def test_it_serves_the_sign_in_page(infera_server: ServerProcess):
    status, body = infera_server.get("/accounts/login/")
    assert status == 200
    assert b'name="username"' in body and b'name="password"' in body


def test_it_prepares_everything_on_the_first_start(infera_server: ServerProcess):
    log = infera_server.log()
    assert "Database is up to date." in log
    assert "Created the user 'admin' with the password INFERA_ADMIN_PASSWORD." in log
    assert "created digits/2" in log and "digits/2: held-out accuracy" in log
    assert (infera_server.var_dir / "secret_key").is_file()
    assert (infera_server.var_dir / "infera.sqlite3").is_file()


@pytest.mark.skipif(ENGINE_MISSING is not None, reason=ENGINE_MISSING or "")
def test_it_is_ready_once_the_demo_models_load(infera_server: ServerProcess):
    assert infera_server.wait_for("/v2/health/ready", 200, timeout=120) == 200
    assert infera_server.get("/v2/health/live")[0] == 200


@pytest.mark.skipif(ENGINE_MISSING is not None, reason=ENGINE_MISSING or "")
def test_it_serves_both_digits_versions_with_their_own_accuracy(infera_server: ServerProcess):
    assert infera_server.wait_for("/v2/health/ready", 200, timeout=120) == 200
    _, _, test_x, test_y = digits_split()
    images, labels = test_x[:50], test_y[:50]  # fewer than max_batch_size: the batcher must flush on its delay
    accuracy = {}
    for version in (1, 2):
        body = {
            "inputs": [
                {"name": "image", "shape": list(images.shape), "datatype": "FP32", "data": images.ravel().tolist()}
            ]
        }
        request = urllib.request.Request(
            f"{infera_server.base_url}/v2/models/digits/versions/{version}/infer",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answer = json.load(response)
        assert answer["model_version"] == str(version)
        probabilities = np.array(answer["outputs"][0]["data"]).reshape(len(images), 10)
        accuracy[version] = float((probabilities.argmax(axis=1) == labels).mean())
    assert accuracy[2] > 0.9 > accuracy[1] + 0.2


def test_it_serves_static_files_itself(infera_server: ServerProcess):
    status, body = infera_server.get("/static/vendor/plotly.min.js")
    assert status == 200 and len(body) > 1_000_000
    assert infera_server.get("/static/console/console.css")[0] == 200


def test_it_keeps_the_console_behind_sign_in(infera_server: ServerProcess):
    status, body = infera_server.get("/")  # urllib follows the redirect to the sign-in page
    assert status == 200 and b'name="password"' in body


def test_it_serves_with_daphne_and_restarts_without_redoing_the_first_start(infera_server: ServerProcess):
    # the same var/ as the uvicorn server: migrations, the admin and the models are all there already
    with serve_process(infera_server.var_dir, "--server", "daphne") as daphne:
        assert daphne.get("/accounts/login/")[0] == 200
        if ENGINE_MISSING is None:
            assert daphne.wait_for("/v2/health/ready", 200, timeout=120) == 200
        assert daphne.get("/static/console/console.css")[0] == 200
    log = daphne.log()
    assert "Created the user" not in log
    assert "kept digits/2 (already in the store)" in log
    assert daphne.process.returncode == 0, log[-3000:]
