"""What the rendered manifests must say, whichever way they are rendered: health probes on the right paths and
ports, a drain that ends before Kubernetes kills, GPUs where asked, one image and environment for the Job and the
replicas, secrets from Secrets, replicas that never migrate, unprivileged pods, and selectors that meet."""

from __future__ import annotations

import shlex
from urllib.parse import urlsplit

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from engine.monitoring.prometheus import MetricsApp
from engine.serving.server import InferenceServer
from tests.deploy.manifests import (
    GPU_RENDERS,
    K8S_DIR,
    RENDERS,
    SECRET_SETTINGS,
    Manifests,
    all_containers,
    pod_spec,
    rendered,
)
from tests.engine.monitoring.doubling_model import write_doubler

EVERY_RENDER = sorted(RENDERS)
ADAPTER_VALUES = K8S_DIR / "components" / "hpa-pending-requests" / "prometheus-adapter-values.yaml"


def container_port(container: dict, name: str) -> int:
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == name]
    return port


def pre_stop_seconds(container: dict) -> int:
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep" and len(command) == 2, command
    return int(command[1])


@pytest.mark.parametrize("render", EVERY_RENDER)
def test_it_probes_the_health_paths_on_the_http_port(render):
    manifests = rendered(render)
    server = manifests.server_container()
    probes = {kind: server[kind]["httpGet"] for kind in ("startupProbe", "readinessProbe", "livenessProbe")}
    assert probes["readinessProbe"]["path"] == "/v2/health/ready"
    assert probes["livenessProbe"]["path"] == "/v2/health/live"
    # the process answers at once and loads models behind readiness: its start-up only needs it to be live
    assert probes["startupProbe"]["path"] == "/v2/health/live"
    assert {probe["port"] for probe in probes.values()} == {"http"}
    startup = server["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120, "no room for a slow start"
    assert container_port(server, "http") == int(manifests.setting(server, "PORT"))
    assert container_port(server, "grpc") == int(manifests.setting(server, "INFERA_GRPC_PORT"))
    assert manifests.setting(server, "HOST") == "0.0.0.0"


@pytest.mark.parametrize("render", EVERY_RENDER)
def test_it_serves_http_and_grpc_through_services(render):
    manifests = rendered(render)
    ports = {
        port["name"]: port
        for service in manifests.of_kind("Service")
        if service["spec"].get("type") != "ExternalName"
        for port in service["spec"]["ports"]
    }
    assert set(ports) == {"http", "grpc"}
    assert ports["http"]["targetPort"] == "http" and ports["http"]["port"] == 8000
    assert ports["grpc"]["targetPort"] == "grpc" and ports["grpc"]["port"] == 8001
    assert ports["grpc"]["appProtocol"] == "grpc"


@pytest.mark.parametrize("render", EVERY_RENDER)
def test_it_lets_replicas_drain_before_kubernetes_kills_them(render):
    manifests = rendered(render)
    server = manifests.server_container()
    grace = int(manifests.setting(server, "INFERA_SHUTDOWN_GRACE_SECONDS"))
    pause = pre_stop_seconds(server)
    assert pause >= 1, "without a pause the listener closes while endpoints still route to it"
    assert pod_spec(manifests.deployment)["terminationGracePeriodSeconds"] > grace + pause
    rolling = manifests.deployment["spec"]["strategy"]["rollingUpdate"]
    assert rolling["maxSurge"] + rolling["maxUnavailable"] >= 1


@pytest.mark.parametrize("render", EVERY_RENDER)
def test_it_gives_a_gpu_to_the_gpu_renders_only(render):
    manifests = rendered(render)
    spec = pod_spec(manifests.deployment)
    limits = manifests.server_container()["resources"].get("limits", {})
    if render in GPU_RENDERS:
        assert int(limits["nvidia.com/gpu"]) >= 1
        assert {t["key"] for t in spec["tolerations"]} >= {"nvidia.com/gpu"}
        assert spec["nodeSelector"]
    else:
        assert "nvidia.com/gpu" not in limits
        assert "nodeSelector" not in spec and "tolerations" not in spec
    for container in all_containers(manifests.deployment) + all_containers(manifests.job):
        if container is not manifests.server_container():
            assert "nvidia.com/gpu" not in container["resources"].get("limits", {}), container["name"]


@pytest.mark.parametrize("render", EVERY_RENDER)
def test_it_runs_the_job_and_the_replicas_on_one_image_and_environment(render):
    manifests = rendered(render)
    containers = all_containers(manifests.deployment) + all_containers(manifests.job)
    assert len({container["image"] for container in containers}) == 1
    assert ":" in containers[0]["image"], "an image without a tag means :latest"
    environments = [manifests.env(container) for container in containers]
    assert all(environment == environments[0] for environment in environments)


@pytest.mark.parametrize("render", EVERY_RENDER)
def test_it_takes_every_secret_from_a_secret(render):
    manifests = rendered(render)
    for container in all_containers(manifests.deployment) + all_containers(manifests.job):
        environment = manifests.env(container)
        for name in SECRET_SETTINGS:
            source = environment[name]
            if source[0] == "value":
                # a subchart's URL: its password is the $(VAR) of a variable from the subchart's Secret
                password = urlsplit(source[1]).password
                assert password is not None and password.startswith("$(") and password.endswith(")"), source
                assert environment[password[2:-1]][0] == "secret"
                names = [entry["name"] for entry in container["env"]]
                assert names.index(password[2:-1]) < names.index(name), "$(VAR) must be defined before its use"
            else:
                assert source[0] == "secret", f"{name} of {container['name']} comes from {source}"
    for config_map in manifests.of_kind("ConfigMap"):
        assert not set(config_map["data"]) & set(SECRET_SETTINGS)


@pytest.mark.parametrize("render", EVERY_RENDER)
def test_it_gives_each_secret_the_keys_the_pods_read(render):
    manifests = rendered(render)
    example = yaml.safe_load((K8S_DIR / "base" / "secret.example.yaml").read_text())
    secrets = {s["metadata"]["name"]: set(s["stringData"]) for s in manifests.of_kind("Secret")}
    read = {source[1:] for source in manifests.env(manifests.server_container()).values() if source[0] == "secret"}
    for name, key in read:
        if name in secrets:
            assert key in secrets[name]
        elif name == example["metadata"]["name"]:
            assert key in example["stringData"], f"the example Secret lacks {key}"
        else:
            assert name.endswith(("-postgresql", "-redis")), f"a Secret {name} nobody makes"


def test_it_never_applies_a_placeholder_secret():
    # `kubectl apply -k` must not overwrite the Secret a person made with the example's values
    assert rendered("kustomize-cpu").of_kind("Secret") == []
    assert rendered("helm-default").of_kind("Secret") == []


@pytest.mark.parametrize("render", EVERY_RENDER)
def test_it_migrates_once_in_the_job_and_never_in_the_replicas(render):
    manifests = rendered(render)
    server = manifests.server_container()
    assert server["command"] == ["python", "manage.py", "serve"]
    assert manifests.setting(server, "INFERA_MIGRATE") == "false"
    assert manifests.setting(server, "INFERA_SEED_DEMO") == "false"
    (migrate,) = manifests.job["spec"]["template"]["spec"]["containers"]
    assert migrate["command"][:3] == ["python", "manage.py", "migrate"]
    (waiting,) = pod_spec(manifests.deployment)["initContainers"]
    assert "python manage.py migrate --check" in " ".join(waiting["command"])
    assert shlex.split(waiting["command"][-1])[0] == "until"


@pytest.mark.parametrize("render", EVERY_RENDER)
def test_it_names_each_replica_after_its_pod(render):
    manifests = rendered(render)
    assert manifests.env(manifests.server_container())["INFERA_REPLICA_NAME"] == ("field", "metadata.name")


@pytest.mark.parametrize("render", EVERY_RENDER)
def test_it_runs_unprivileged_on_a_read_only_root(render):
    manifests = rendered(render)
    for workload in (manifests.deployment, manifests.job):
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 10001  # the Dockerfile's user
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert spec["automountServiceAccountToken"] is False
        # Service links would set INFERA_GRPC_PORT=tcp://... from the gRPC Service: a setting of Infera's
        assert spec["enableServiceLinks"] is False
        for container in all_containers(workload):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context.get("privileged", False) is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
            assert {"/data", "/tmp"} <= mounts, "var/ and the sandbox's scratch space need writable volumes"
    server = manifests.server_container()
    (store,) = [mount for mount in server["volumeMounts"] if mount["mountPath"] == "/models"]
    assert manifests.setting(server, "INFERA_MODEL_STORE") == "/models"
    assert manifests.setting(server, "INFERA_VAR_DIR") == "/data"
    (volume,) = [v for v in pod_spec(manifests.deployment)["volumes"] if v["name"] == store["name"]]
    claim = manifests.named("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


@pytest.mark.parametrize("render", EVERY_RENDER)
def test_it_points_every_selector_at_the_serving_pods(render):
    manifests = rendered(render)
    deployment = manifests.deployment
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(deployment["spec"]["selector"]["matchLabels"], pod_labels)
    job_labels = manifests.job["spec"]["template"]["metadata"]["labels"]
    services = [s for s in manifests.of_kind("Service") if s["spec"].get("type") != "ExternalName"]
    for service in services:
        assert selects(service["spec"]["selector"], pod_labels)
        assert not selects(service["spec"]["selector"], job_labels), "a Service must not route to the Job"
    for budget in manifests.of_kind("PodDisruptionBudget"):
        assert selects(budget["spec"]["selector"]["matchLabels"], pod_labels)
    for autoscaler in manifests.of_kind("HorizontalPodAutoscaler"):
        target = autoscaler["spec"]["scaleTargetRef"]
        assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
        assert "replicas" not in deployment["spec"], "the HPA owns the count; an apply would reset it"
    for monitor in manifests.of_kind("ServiceMonitor"):
        matched = [s for s in services if selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
        for endpoint in monitor["spec"]["endpoints"]:
            scraped = [s for s in matched if endpoint["port"] in {p["name"] for p in s["spec"]["ports"]}]
            assert len(scraped) == 1, "each replica must be scraped once"
            assert endpoint["path"] == "/metrics"


def test_it_keeps_a_fixed_replica_count_without_an_autoscaler():
    manifests = rendered("helm-fixed-replicas")
    assert manifests.of_kind("HorizontalPodAutoscaler") == []
    assert manifests.deployment["spec"]["replicas"] == 3


def pending_metric_names(manifests: Manifests) -> set[str]:
    (autoscaler,) = manifests.of_kind("HorizontalPodAutoscaler")
    return {m["pods"]["metric"]["name"] for m in autoscaler["spec"]["metrics"] if m["type"] == "Pods"}


def test_it_asks_the_same_of_the_adapter_in_both_renderings():
    asked = pending_metric_names(rendered("kustomize-gpu-with-components"))
    assert asked == pending_metric_names(rendered("helm-everything"))
    assert pending_metric_names(rendered("kustomize-gpu")) == set()


async def test_it_scales_on_a_metric_that_metrics_exposes(tmp_path):
    asked = pending_metric_names(rendered("helm-everything"))
    (rule,) = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]
    assert {rule["name"]["as"]} == asked
    assert rule["seriesQuery"].startswith(rule["name"]["matches"] + "{")
    server = InferenceServer(write_doubler(tmp_path))
    await server.start()
    try:
        text = await scrape(MetricsApp(server))
    finally:
        await server.stop()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    for name in asked:
        assert families[name].type == "gauge"
        assert [sample.labels["model"] for sample in families[name].samples] == ["doubler"]


async def scrape(app: MetricsApp) -> str:
    messages: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        messages.append(message)

    await app({"type": "http", "method": "GET", "path": "/metrics", "headers": []}, receive, send)
    return messages[-1]["body"].decode()
