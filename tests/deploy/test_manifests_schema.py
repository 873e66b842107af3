"""Every rendered manifest against the API schemas of current Kubernetes (kubernetes-validate's bundled, strict
schemas) and the ServiceMonitor against the Prometheus operator's API, as an API server would check them."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deploy.manifests import K8S_DIR, RENDERS, rendered

# the oldest version Chart.yaml's kubeVersion admits, and the newest the validator knows
KUBERNETES_VERSIONS = ("1.25", kubernetes_validate.utils.latest_version())
SERVICE_MONITOR_SCHEMA = json.loads((Path(__file__).parent / "schemas" / "servicemonitor-v1.json").read_text())
# custom resources: not in Kubernetes' own schemas, each checked against its own
CUSTOM_SCHEMAS = {("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR_SCHEMA}


def check(document: dict) -> None:
    custom = CUSTOM_SCHEMAS.get((document["apiVersion"], document["kind"]))
    if custom is not None:
        jsonschema.Draft202012Validator(custom).validate(document)
        return
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            where = "/".join(str(part) for part in error.path)
            name = f"{document['kind']} {document['metadata']['name']}"
            pytest.fail(f"{name} is not valid on Kubernetes {version} at {where}: {error.message}")


def test_it_knows_a_current_kubernetes():
    assert tuple(int(part) for part in KUBERNETES_VERSIONS[-1].split(".")) >= (1, 32)


@pytest.mark.parametrize("render", sorted(RENDERS))
def test_it_renders_only_valid_objects(render):
    manifests = rendered(render)
    assert manifests.objects
    for document in manifests.objects:
        check(document)


def test_it_checks_service_monitors_strictly():
    (monitor,) = rendered("helm-everything").of_kind("ServiceMonitor")
    misspelt = json.loads(json.dumps(monitor))
    misspelt["spec"]["endpoints"][0]["scrapTimeout"] = "10s"
    with pytest.raises(jsonschema.ValidationError, match="scrapTimeout"):
        check(misspelt)
    wrong_duration = json.loads(json.dumps(monitor))
    wrong_duration["spec"]["endpoints"][0]["interval"] = "15 seconds"
    with pytest.raises(jsonschema.ValidationError):
        check(wrong_duration)


def test_it_ships_a_valid_example_secret():
    check(yaml.safe_load((K8S_DIR / "base" / "secret.example.yaml").read_text()))
