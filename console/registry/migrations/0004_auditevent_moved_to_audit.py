"""The audit event now belongs to the audit app (audit 0001): dropped from the registry's state, its table kept."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("registry", "0003_traffic_policy"),
        ("audit", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="AuditEvent")],
            database_operations=[],
        ),
    ]
