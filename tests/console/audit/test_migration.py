"""Moving the audit event from the registry app to the audit app keeps its table, its rows and its permissions."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from console.audit.models import AuditEvent

BEFORE = [("registry", "0003_traffic_policy"), ("audit", None)]


@pytest.fixture
def executor():
    """Migrations run on the test database; it is migrated to the end again afterwards."""
    yield MigrationExecutor(connection)
    after = MigrationExecutor(connection)
    after.migrate(after.loader.graph.leaf_nodes())


def migrate(executor: MigrationExecutor, targets) -> MigrationExecutor:
    executor.loader.build_graph()
    executor.migrate(targets)
    return MigrationExecutor(connection)


@pytest.mark.django_db(transaction=True)
def test_a_database_made_before_the_move_keeps_its_audit_rows(executor):
    executor = migrate(executor, BEFORE)
    old_state = executor.loader.project_state([BEFORE[0]]).apps
    old_type, _ = ContentType.objects.get_or_create(app_label="registry", model="auditevent")
    Permission.objects.get_or_create(content_type=old_type, codename="view_auditevent", name="Can view audit event")
    OldEvent = old_state.get_model("registry", "AuditEvent")
    OldEvent.objects.create(actor_name="alice", action="model.register", object="digits", detail={"n": 1})
    OldEvent.objects.create(actor_name="", action="version.load", object="digits/1")

    migrate(executor, executor.loader.graph.leaf_nodes())

    rows = list(AuditEvent.objects.order_by("id").values_list("actor_name", "action", "object", "detail"))
    assert rows == [("alice", "model.register", "digits", {"n": 1}), ("", "version.load", "digits/1", {})]
    assert AuditEvent._meta.db_table == "registry_auditevent"
    moved = Permission.objects.get(codename="view_auditevent")
    assert moved.content_type.app_label == "audit" and moved.content_type.pk == old_type.pk


@pytest.mark.django_db(transaction=True)
def test_the_move_can_be_undone_without_losing_rows(executor):
    AuditEvent.record("alice", "model.register", "digits")
    executor = migrate(executor, BEFORE)
    OldEvent = executor.loader.project_state([BEFORE[0]]).apps.get_model("registry", "AuditEvent")
    assert list(OldEvent.objects.values_list("actor_name", "object")) == [("alice", "digits")]
