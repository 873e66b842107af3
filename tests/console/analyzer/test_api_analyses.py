"""/api/models/{name}/analyses/...: start (checked and bounded), one at a time, cancel, apply, and who may do what."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from console.analyzer import services
from console.analyzer.models import Analysis, AnalysisState
from console.audit.models import AuditEvent
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from tests.console.registry.conftest import SIMPLE_PBTXT, model_file, upload

pytestmark = pytest.mark.django_db

URL = "/api/models/simple/analyses/"
TWO_CONFIGS = {
    "budget_ms": 50,
    "max_concurrency": 2,
    "max_batch_sizes": [8],
    "queue_delays_us": [0, 500],
    "instance_counts": [1],
    "seconds_per_point": 0.1,
}


@pytest.fixture(autouse=True)
def simple(as_operator, simple_onnx):
    """simple with one version, active and READY as if the reconciler had loaded it."""
    as_operator.post("/api/models/", {"name": "simple"}, format="json")
    assert upload(as_operator, "simple", model_file(simple_onnx), config=SIMPLE_PBTXT).status_code == 201
    ModelVersion.objects.filter(number=1).update(state=VersionState.READY)


def start(client, **changes):
    return client.post(URL, {**TWO_CONFIGS, **changes}, format="json")


def finished(analysis_id: int, points: list[tuple[int, int, float, float]]) -> Analysis:
    """Run an analysis's bookkeeping as the runner would, with these (candidate, concurrency, throughput, p99)."""
    assert services.claim_next().id == analysis_id
    for candidate, concurrency, throughput, p99 in points:
        services.record_point(
            analysis_id,
            {
                "candidate": candidate,
                "concurrency": concurrency,
                "requests": 10,
                "failures": 0,
                "seconds": 0.1,
                "throughput": throughput,
                "p50_ms": p99 / 2,
                "p99_ms": p99,
                "mean_batch": 1.0,
                "client_requests": 0,
                "error": "",
            },
        )
    services.finish(analysis_id, AnalysisState.DONE)
    return Analysis.objects.get(pk=analysis_id)


def test_it_queues_an_operators_analysis_for_a_serving_process(as_operator):
    answer = start(as_operator)
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["model"], body["version"], body["state"], body["requested_by"]) == ("simple", 1, "QUEUED", "otto")
    assert [c["label"] for c in body["plan"]["candidates"]] == [
        "batch 8 · delay 0 µs · 1 instance",
        "batch 8 · delay 500 µs · 1 instance",
    ]
    assert body["plan"]["concurrency"] == [1, 2]
    assert body["progress"] == {"done": 0, "total": 4}
    assert body["points"] == [] and body["recommendation"] is None
    event = AuditEvent.objects.get(action="analysis.start")
    assert event.actor_name == "otto" and event.object == f"simple/1#analysis-{body['id']}"


def test_it_lets_viewers_read_analyses_but_not_start_cancel_or_apply_one(as_operator, as_viewer):
    created = start(as_operator).json()["id"]
    assert as_viewer.get(URL).status_code == 200
    assert as_viewer.get(f"{URL}{created}/").json()["state"] == "QUEUED"
    assert start(as_viewer).status_code == 403
    assert as_viewer.post(f"{URL}{created}/cancel").status_code == 403
    assert as_viewer.post(f"{URL}{created}/apply", {}, format="json").status_code == 403
    assert Analysis.objects.count() == 1 and Analysis.objects.get().state == AnalysisState.QUEUED


def test_it_runs_analyses_one_at_a_time(as_operator, as_admin):
    first = start(as_operator).json()["id"]
    second = start(as_admin)
    assert second.status_code == 409
    assert f"analysis {first} of 'simple' is still running" in second.json()["detail"]
    assert as_operator.post(f"{URL}{first}/cancel").status_code == 202
    assert start(as_admin).status_code == 201


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"max_batch_sizes": [1, 2, 3], "queue_delays_us": [0, 1, 2]}, "the grid makes 9 configs, over the limit of 8"),
        (
            {"max_concurrency": 64, "seconds_per_point": 10, "queue_delays_us": [0, 1, 2, 3, 4]},
            "the analysis would measure for 350 s (5 configs x 7 concurrency levels x 10 s), over the limit of 300 s",
        ),
        ({"instance_counts": [100]}, "instance_group asks for 100 instances, over the limit of 64"),
        ({"max_batch_sizes": [0]}, "max_batch_size 0 in the grid: a model that batches needs 1 or more"),
        ({"sample_inputs": {"INPUT0": [[1, 2]], "INPUT1": [[1, 2]]}}, "input 'INPUT0' expects shape [-1, 16]"),
        ({"sample_inputs": {"WRONG": [[1]]}}, "unexpected inference input 'WRONG'"),
        ({"version": 7}, "model 'simple' has no version 7"),
    ],
)
def test_it_refuses_an_analysis_past_its_bounds_with_the_reason(as_operator, changes, reason):
    answer = start(as_operator, **changes)
    assert answer.status_code in (400, 404), answer.content
    assert reason in answer.json()["detail"]
    assert not Analysis.objects.exists()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"max_concurrency": 65}, "max_concurrency"),
        ({"budget_ms": 0}, "budget_ms"),
        ({"seconds_per_point": 60}, "seconds_per_point"),
        ({"instance_counts": [0]}, "instance_counts"),
    ],
)
def test_it_refuses_malformed_values_by_field(as_operator, changes, field):
    answer = start(as_operator, **changes)
    assert answer.status_code == 400 and field in answer.json()


def test_it_analyses_only_a_ready_version(as_operator):
    ModelVersion.objects.filter(number=1).update(state=VersionState.LOADING)
    answer = start(as_operator)
    assert answer.status_code == 409 and "only a READY version can be analysed" in answer.json()["detail"]


def test_it_keeps_sample_inputs_that_fit_the_model(as_operator):
    rows = [list(range(16))]
    answer = start(as_operator, sample_inputs={"INPUT0": rows, "INPUT1": rows})
    assert answer.status_code == 201 and answer.json()["sample_inputs"] is True
    assert Analysis.objects.get().sample_inputs == {"INPUT0": rows, "INPUT1": rows}


def test_it_ends_a_cancelled_queued_analysis_audited(as_operator):
    created = start(as_operator).json()["id"]
    answer = as_operator.post(f"{URL}{created}/cancel")
    assert answer.status_code == 202 and answer.json()["state"] == "CANCELLED"
    assert AuditEvent.objects.filter(action="analysis.cancel").exists()
    again = as_operator.post(f"{URL}{created}/cancel")
    assert again.status_code == 409 and "nothing to cancel" in again.json()["detail"]


def test_it_asks_the_runner_of_a_cancelled_running_analysis_to_stop(as_operator):
    created = start(as_operator).json()["id"]
    services.claim_next()
    answer = as_operator.post(f"{URL}{created}/cancel/")
    assert answer.status_code == 202
    assert answer.json()["state"] == "RUNNING" and answer.json()["cancel_requested"] is True
    assert services.heartbeat(created) is True  # what the runner reads


def test_it_applies_the_recommended_config_as_a_new_active_version(as_operator):
    created = start(as_operator, budget_ms=5).json()["id"]
    analysis = finished(created, [(0, 1, 100.0, 2.0), (0, 2, 150.0, 4.0), (1, 1, 90.0, 3.0), (1, 2, 400.0, 9.0)])
    assert analysis.recommendation["candidate"] == 0 and analysis.recommendation["concurrency"] == 2
    body = as_operator.get(f"{URL}{created}/").json()
    assert [p["pareto"] for p in body["points"]] == [True, True, False, True]

    answer = as_operator.post(f"{URL}{created}/apply", {}, format="json")
    assert answer.status_code == 201, answer.content
    version = answer.json()
    assert version["number"] == 2 and version["config"]["dynamic_batching"]["max_queue_delay_microseconds"] == 0
    assert version["notes"] == f"analysis {created}: batch 8 · delay 0 µs · 1 instance"
    assert RegisteredModel.objects.get(name="simple").active_number == 2
    assert Analysis.objects.get(pk=created).applied_version == 2
    assert AuditEvent.objects.get(action="analysis.apply").detail["version"] == 2


def test_it_applies_another_config_of_the_plan_when_asked(as_operator):
    created = start(as_operator).json()["id"]
    finished(created, [(0, 1, 100.0, 2.0), (1, 1, 90.0, 3.0)])
    answer = as_operator.post(f"{URL}{created}/apply", {"candidate": 1}, format="json")
    assert answer.status_code == 201
    assert answer.json()["config"]["dynamic_batching"]["max_queue_delay_microseconds"] == 500
    wrong = as_operator.post(f"{URL}{created}/apply", {"candidate": 5}, format="json")
    assert wrong.status_code in (400, 409)


def test_it_does_not_apply_without_a_recommendation_or_after_the_active_version_changed(as_operator, simple_onnx):
    created = start(as_operator, budget_ms=1).json()["id"]
    finished(created, [(0, 1, 100.0, 2.0)])
    refused = as_operator.post(f"{URL}{created}/apply", {}, format="json")
    assert refused.status_code == 409 and "no config kept p99 within 1 ms" in refused.json()["detail"]

    second = start(as_operator).json()["id"]
    finished(second, [(0, 1, 100.0, 2.0)])
    upload(as_operator, "simple", model_file(simple_onnx), config=SIMPLE_PBTXT, activate="true")
    ModelVersion.objects.filter(number=2).update(state=VersionState.READY)
    RegisteredModel.objects.filter(name="simple").update(active_version=ModelVersion.objects.get(number=2))
    stale = as_operator.post(f"{URL}{second}/apply", {}, format="json")
    assert stale.status_code == 409 and "not the analysed version 1" in stale.json()["detail"]


def test_it_applies_no_queued_or_running_analysis(as_operator):
    created = start(as_operator).json()["id"]
    answer = as_operator.post(f"{URL}{created}/apply", {}, format="json")
    assert answer.status_code == 409 and "only a finished one can be applied" in answer.json()["detail"]


def test_it_ends_an_analysis_whose_process_stopped_and_frees_the_slot(as_operator):
    created = start(as_operator).json()["id"]
    services.claim_next()
    long_ago = timezone.now() - datetime.timedelta(seconds=services.STALE_SECONDS + 1)
    Analysis.objects.filter(pk=created).update(heartbeat_at=long_ago)
    assert start(as_operator).status_code == 201
    stopped = Analysis.objects.get(pk=created)
    assert stopped.state == AnalysisState.FAILED and stopped.error == "the serving process running it stopped"


def test_it_lists_a_models_analyses_newest_first(as_operator):
    first = start(as_operator).json()["id"]
    as_operator.post(f"{URL}{first}/cancel")
    second = start(as_operator).json()["id"]
    listed = as_operator.get(URL).json()
    assert [a["id"] for a in listed] == [second, first]
    assert as_operator.get("/api/models/simple/analyses/999/").status_code == 404
    assert as_operator.get("/api/models/nothing/analyses/").status_code == 404


def test_it_documents_the_analysis_endpoints_in_the_openapi_schema(as_viewer):
    schema = as_viewer.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    assert {"get", "post"} <= set(paths["/api/models/{name}/analyses/"])
    assert "get" in paths["/api/models/{name}/analyses/{id}/"]
    assert "post" in paths["/api/models/{name}/analyses/{id}/cancel"]
    assert "post" in paths["/api/models/{name}/analyses/{id}/apply"]
    assert {"AnalysisStart", "AnalysisStateEnum"} <= set(schema["components"]["schemas"])
