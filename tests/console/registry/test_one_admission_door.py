"""One admission door: the console's uploads and config edits admit through the serving process's own server
(`runtime_of(request).server`), with the GPUs it places instances on, and check each version once."""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from types import SimpleNamespace

import pytest
from django.urls import resolve
from rest_framework.test import APIRequestFactory, force_authenticate

from console.registry.models import ModelVersion, VersionState
from console.registry.services import lookups
from console.registry.v2_hooks import _new_version
from console.runtime_of import RUNTIME_KEY
from engine.isolation import sandbox
from engine.serving import admission
from engine.serving import server as server_module
from engine.serving.server import InferenceServer
from tests.console.registry.conftest import SIMPLE_PBTXT, model_file, upload, zip_of

pytestmark = pytest.mark.django_db

ON_GPU = SIMPLE_PBTXT + "instance_group [ { kind: KIND_GPU count: 1 } ]\n"
NO_GPU = "asks for KIND_GPU but this machine has no GPU"


@pytest.fixture(autouse=True)
def registered(as_operator):
    assert as_operator.post("/api/models/", {"name": "simple"}, format="json").status_code == 201


@pytest.fixture
def trial_gpus(monkeypatch) -> list[int]:
    """The GPU count each sandboxed trial load was given (the child places instance groups against it)."""
    given: list[int] = []
    real = sandbox.trial_load_isolated

    def recording(name, version_dir, config, settings, gpus):
        given.append(gpus)
        return real(name, version_dir, config, settings, gpus)

    monkeypatch.setattr(sandbox, "trial_load_isolated", recording)
    return given


@pytest.fixture
def checks(monkeypatch) -> list[str]:
    """The model names the admissibility check ran for, one entry a run."""
    names: list[str] = []
    real = admission.check_admissible

    def counting(name, *args, **kwargs):
        names.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(admission, "check_admissible", counting)
    return names


def through_runtime(user, method: str, path: str, data, gpus: int, format: str):
    """A request to the console's API, as a serving process's application makes it: the runtime in its scope,
    whose server has `gpus` GPUs (this machine has none, or they are not counted here)."""
    request = getattr(APIRequestFactory(), method)(path, data, format=format)
    request.scope = {RUNTIME_KEY: SimpleNamespace(server=InferenceServer(gpu_count=gpus))}
    force_authenticate(request, user=user)
    match = resolve(path)
    return match.func(request, *match.args, **match.kwargs)


def test_a_kind_gpu_upload_is_admitted_with_the_serving_servers_gpus(operator, simple_onnx, trial_gpus):
    data = {"file": model_file(simple_onnx), "config": ON_GPU}
    answer = through_runtime(operator, "post", "/api/models/simple/versions/", data, gpus=1, format="multipart")
    assert answer.status_code == 201, answer.data
    assert answer.data["state"] == "PENDING"
    assert answer.data["config"]["instance_group"][0]["kind"] == "KIND_GPU"
    assert trial_gpus == [1]


def test_a_kind_gpu_upload_on_a_server_without_a_gpu_fails_its_trial_load(operator, simple_onnx, trial_gpus):
    data = {"file": model_file(simple_onnx), "config": ON_GPU}
    answer = through_runtime(operator, "post", "/api/models/simple/versions/", data, gpus=0, format="multipart")
    assert answer.status_code == 400
    assert NO_GPU in answer.data["detail"]
    assert trial_gpus == [0]


def test_outside_a_serving_process_an_upload_is_admitted_with_this_machines_gpus(
    as_operator, simple_onnx, monkeypatch, trial_gpus
):
    monkeypatch.setattr(server_module, "gpu_count", lambda: 1)  # the device discovery the server uses
    answer = upload(as_operator, "simple", model_file(simple_onnx), config=ON_GPU)
    assert answer.status_code == 201, answer.content
    assert trial_gpus == [1]


@pytest.mark.parametrize("action", ["apply", "new_version"])
def test_a_config_edit_to_kind_gpu_is_admitted_with_the_serving_servers_gpus(
    as_operator, operator, simple_onnx, trial_gpus, action
):
    assert upload(as_operator, "simple", model_file(simple_onnx), config=SIMPLE_PBTXT).status_code == 201
    ModelVersion.objects.filter(number=1).update(state=VersionState.READY)
    data = {"action": action, "format": "pbtxt", "text": ON_GPU}
    answer = through_runtime(operator, "post", "/api/models/simple/config", data, gpus=1, format="json")
    assert answer.status_code == (202 if action == "apply" else 201), answer.data
    assert answer.data["config"]["instance_group"][0]["kind"] == "KIND_GPU"
    assert trial_gpus == [0, 1]  # the first upload went through this process's own door (no GPU here)


def test_the_config_validator_checks_with_the_serving_servers_door(as_operator, viewer, simple_onnx, checks):
    assert upload(as_operator, "simple", model_file(simple_onnx), config=SIMPLE_PBTXT).status_code == 201
    checks.clear()
    data = {"format": "pbtxt", "text": ON_GPU}
    answer = through_runtime(viewer, "post", "/api/models/simple/config/validate", data, gpus=1, format="json")
    assert answer.status_code == 200 and answer.data["valid"] is True, answer.data
    assert checks == ["simple"]


# ---- the admissibility check runs once per version


def test_an_upload_is_checked_once(as_operator, simple_onnx, checks):
    answer = upload(as_operator, "simple", model_file(simple_onnx), config=SIMPLE_PBTXT)
    assert answer.status_code == 201, answer.content
    assert checks == ["simple"]


def test_an_archive_of_two_models_checks_each_version_once(as_operator, simple_onnx, checks):
    other = SIMPLE_PBTXT.replace('name: "simple"', 'name: "other"')
    archive = zip_of(
        {
            "simple/config.pbtxt": SIMPLE_PBTXT.encode(),
            "simple/1/model.onnx": simple_onnx,
            "other/config.pbtxt": other.encode(),
            "other/1/model.onnx": simple_onnx,
        }
    )
    answer = upload(as_operator, "simple", model_file(archive, "models.zip"))
    assert answer.status_code == 201, answer.content
    assert sorted(checks) == ["other", "simple"]


def test_a_config_edit_saved_as_a_new_version_is_checked_once(as_operator, simple_onnx, checks):
    assert upload(as_operator, "simple", model_file(simple_onnx), config=SIMPLE_PBTXT).status_code == 201
    ModelVersion.objects.filter(number=1).update(state=VersionState.READY)
    checks.clear()
    smaller = SIMPLE_PBTXT.replace("max_batch_size: 8", "max_batch_size: 4")
    edit = {"action": "new_version", "format": "pbtxt", "text": smaller}
    answer = as_operator.post("/api/models/simple/config", json.dumps(edit), content_type="application/json")
    assert answer.status_code == 201, answer.content
    assert checks == ["simple"]


def test_a_refused_caller_is_still_refused_before_anything_is_recorded(as_operator, checks):
    answer = upload(as_operator, "simple", model_file(b"import triton_python_backend_utils\n", "model.py"))
    assert answer.status_code == 403, answer.content
    assert "only admins may upload" in answer.json()["detail"]
    assert not ModelVersion.objects.exists()
    assert checks == ["simple"]


def test_a_v2_load_with_files_is_admitted_with_the_serving_servers_gpus(operator, simple_onnx, trial_gpus):
    config = {"instance_group": [{"kind": "KIND_GPU", "count": 1}]}
    files = {PurePosixPath("1/model.onnx"): simple_onnx}
    assert _new_version(lookups.caller_of(operator), "simple", files, config, InferenceServer(gpu_count=1))
    version = ModelVersion.objects.get()
    assert (version.state, version.config["instance_group"][0]["kind"]) == (VersionState.PENDING, "KIND_GPU")
    assert trial_gpus == [1]
