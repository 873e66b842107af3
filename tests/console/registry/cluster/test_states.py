"""Each version's state on each replica, and what the registry shows of them: READY where any live replica serves
it, failures per replica, replicas that stopped reporting marked gone and not counted."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from console.registry.cluster.models import FORGOTTEN_AFTER, Replica, VersionOnReplica
from console.registry.cluster.states import ReplicaStates, beat, mark_stopped
from console.registry.desired import mark_loading, read_plans, record_outcome
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from console.registry.services import v2_actions

pytestmark = pytest.mark.django_db


@pytest.fixture
def version() -> ModelVersion:
    model = RegisteredModel.objects.create(name="digits")
    version = ModelVersion.objects.create(model=model, number=1, artifact="digits/1", should_load=True)
    model.active_version = version
    model.save()
    return version


def replicas(*names: str) -> None:
    for name in names:
        beat(name, f"{name}:8000", 5.0, timezone.now())


def fresh(version: ModelVersion) -> ModelVersion:
    return ModelVersion.objects.select_related("model").get(pk=version.pk)


def summary(version: ModelVersion) -> str:
    return ReplicaStates.read().summary(fresh(version))


def test_it_is_ready_where_any_live_replica_serves_it(version):
    replicas("a", "b", "c")
    record_outcome("a", "digits", {1}, {})
    record_outcome("b", "digits", {1}, {})
    record_outcome("c", "digits", set(), {1: "CUDA out of memory"})
    assert fresh(version).state == VersionState.READY and fresh(version).error == ""
    assert summary(version) == "READY on 2/3 · FAILED on 1: CUDA out of memory"


def test_it_is_failed_once_it_failed_on_every_live_replica(version):
    replicas("a", "b")
    record_outcome("a", "digits", set(), {1: "bad graph"})
    record_outcome("b", "digits", set(), {1: "bad graph"})
    assert (fresh(version).state, fresh(version).error) == (VersionState.FAILED, "bad graph")
    assert summary(version) == "FAILED on 2: bad graph"


def test_it_shows_loading_while_one_replica_loads_and_none_serves(version):
    replicas("a", "b")
    mark_loading("a", "digits", {1})
    assert fresh(version).state == VersionState.LOADING
    assert summary(version) == "LOADING on 1"
    record_outcome("a", "digits", {1}, {})
    assert summary(version) == "READY on 1/2"


def test_it_leaves_a_failed_version_out_only_where_it_failed(version):
    replicas("a", "b")
    record_outcome("a", "digits", {1}, {})
    record_outcome("b", "digits", set(), {1: "no room on the GPU"})
    assert read_plans("a")[0].versions.keys() == {1}
    assert read_plans("b")[0].versions == {}  # b does not try again and again
    assert read_plans("c")[0].versions.keys() == {1}  # a replica that never tried it does


def test_it_tries_again_on_every_replica_when_a_load_is_asked_again(version):
    replicas("a", "b")
    record_outcome("a", "digits", set(), {1: "bad graph"})
    record_outcome("b", "digits", set(), {1: "bad graph"})
    fresh(version).request_load()
    assert fresh(version).state == VersionState.PENDING
    assert read_plans("a")[0].versions.keys() == {1} and read_plans("b")[0].versions.keys() == {1}


def test_it_leaves_out_a_version_that_failed_before_any_replica_tried_it(version):
    version.fail("its trial load failed: no model file")
    assert read_plans("a")[0].versions == {}


def test_it_stops_counting_a_replica_that_stopped_reporting(version):
    replicas("a", "b", "c")
    for name in ("a", "b", "c"):
        record_outcome(name, "digits", {1}, {})
    Replica.objects.filter(name="c").update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    mark_stopped("b")
    view = ReplicaStates.read()
    assert view.live == ("a",) and {r.name for r in view.gone} == {"b", "c"}
    assert view.summary(fresh(version)) == "READY on 1/1"
    states = {s.replica: s.live for s in view.of_version(fresh(version))}
    assert states == {"a": True, "b": False, "c": False}  # still listed, marked gone


def test_it_counts_a_gone_replica_again_once_it_reports(version):
    replicas("a", "b")
    mark_stopped("b")
    assert ReplicaStates.read().live == ("a",)
    replicas("b")
    assert ReplicaStates.read().live == ("a", "b")


def test_a_version_a_gone_replica_failed_is_ready_on_the_others(version):
    replicas("a", "b")
    record_outcome("b", "digits", set(), {1: "bad graph"})
    mark_stopped("b")
    record_outcome("a", "digits", {1}, {})
    assert fresh(version).state == VersionState.READY


def test_it_forgets_replicas_gone_for_long():
    replicas("old")
    Replica.objects.filter(name="old").update(expires_at=timezone.now() - FORGOTTEN_AFTER * 2)
    replicas("new")
    assert list(Replica.objects.values_list("name", flat=True)) == ["new"]


def test_it_shows_no_summary_with_one_replica(version):
    replicas("only")
    record_outcome("only", "digits", {1}, {})
    assert fresh(version).state == VersionState.READY
    assert summary(version) == ""


def test_it_writes_a_state_only_for_versions_a_replica_tried(version):
    replicas("a")
    record_outcome("a", "digits", set(), {})
    assert not VersionOnReplica.objects.exists()


def test_a_v2_load_hears_of_the_failure_on_its_own_replica(version):
    replicas("a", "b")
    record_outcome("a", "digits", {1}, {})
    record_outcome("b", "digits", set(), {1: "no room on the GPU"})
    assert v2_actions.failures_of("digits", [1], "b") == "version 1: no room on the GPU"
    assert v2_actions.failures_of("digits", [1], "a") == ""
