"""The Helm chart itself, through Helm's own engine: its lint, the values it refuses with a message, the URLs it
makes for the optional PostgreSQL and Redis subcharts, and its notes."""

from __future__ import annotations

import helm_python
import pytest
import yaml

from tests.deploy.manifests import CHART_DIR, NAMESPACE, RELEASE, helm_render, helm_values, rendered

CONFIGMAP = "infera/templates/configmap.yaml"


def test_it_lints_with_only_the_subcharts_missing():
    report = helm_python.lint(CHART_DIR, strict=True, namespace=NAMESPACE, kube_version="v1.33.0")
    serious = [message["error"] for message in report["messages"] if message["severity"] >= 2]
    # the optional subcharts are declared but not downloaded (`helm dependency build` fetches them)
    assert serious == ["chart directory is missing these dependencies: postgresql,redis"]


def test_it_declares_postgresql_and_redis_as_optional_subcharts():
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    conditions = {dependency["name"]: dependency["condition"] for dependency in chart["dependencies"]}
    assert conditions == {"postgresql": "postgresql.enabled", "redis": "redis.enabled"}
    defaults = helm_values("values.yaml")
    assert defaults["postgresql"]["enabled"] is False and defaults["redis"]["enabled"] is False


def test_it_refuses_a_grace_period_too_short_to_drain():
    with pytest.raises(helm_python.HelmRenderError, match=r"terminationGracePeriodSeconds \(30\) must be above"):
        helm_render(values={"terminationGracePeriodSeconds": 30})


def test_it_writes_only_infera_variables_it_does_not_set_itself_from_config_extra():
    extra = {"INFERA_RECONCILE_SECONDS": 10}
    assert 'INFERA_RECONCILE_SECONDS: "10"' in helm_render(values={"config": {"extra": extra}})[CONFIGMAP]
    for name, refusal in [
        ("INFERA_X: 1\n  INFERA_MIGRATE", "is not an INFERA_\\* variable name"),  # a key that writes another
        ("PYTHONPATH", "is not an INFERA_\\* variable name"),
        ("INFERA_MIGRATE", "INFERA_MIGRATE is set by the chart"),
    ]:
        with pytest.raises(helm_python.HelmRenderError, match=refusal):
            helm_render(values={"config": {"extra": {name: "true"}}})


def test_it_asks_for_the_values_of_a_secret_it_makes():
    with pytest.raises(helm_python.HelmRenderError, match="secret.secretKey is needed with secret.create"):
        helm_render(values={"secret": {"create": True}})


def test_it_reads_an_existing_secret_by_default():
    manifests = rendered("helm-default")
    read = {source[1] for source in manifests.env(manifests.server_container()).values() if source[0] == "secret"}
    assert read == {f"{RELEASE}-secrets"}
    named = rendered("helm-everything")
    (secret,) = named.of_kind("Secret")
    assert set(secret["stringData"]) == {"secret-key", "admin-password", "database-url", "redis-url"}


def test_it_makes_the_urls_of_enabled_subcharts_from_their_secrets():
    manifests = rendered("helm-subcharts")
    environment = manifests.env(manifests.server_container())
    assert environment["POSTGRESQL_PASSWORD"] == ("secret", f"{RELEASE}-postgresql", "password")
    assert environment["DATABASE_URL"] == (
        "value",
        f"postgres://infera:$(POSTGRESQL_PASSWORD)@{RELEASE}-postgresql:5432/infera",
    )
    assert environment["REDIS_PASSWORD"] == ("secret", f"{RELEASE}-redis", "redis-password")
    assert environment["REDIS_URL"] == ("value", f"redis://:$(REDIS_PASSWORD)@{RELEASE}-redis-master:6379/0")


def test_it_names_a_new_migration_job_for_each_revision():
    # a Job's pod template cannot change: each upgrade runs a Job of its own
    (job,) = rendered("helm-default").of_kind("Job")
    assert job["metadata"]["name"] == f"{RELEASE}-migrate-1"
    assert job["spec"]["ttlSecondsAfterFinished"] > 0


def test_it_tells_how_to_reach_the_console_and_the_secret_it_needs():
    notes = helm_render()[f"{RELEASE}/templates/NOTES.txt"]
    assert f"port-forward service/{RELEASE} 8000:8000" in notes
    assert f"the Secret {RELEASE}-secrets" in notes
    assert "issue_token admin" in notes
