"""The audit event moves here from the registry app: its table (registry_auditevent) and rows stay as they are.

Only Django's state changes (registry 0004 drops the model from the registry's state after this adds it here); the
content type is relabelled so the permissions on audit events, and the role groups holding them, carry over.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def relabel_content_type(apps, schema_editor, old="registry", new="audit"):
    content_types = apps.get_model("contenttypes", "ContentType").objects.using(schema_editor.connection.alias)
    if not content_types.filter(app_label=new, model="auditevent").exists():
        content_types.filter(app_label=old, model="auditevent").update(app_label=new)


def restore_content_type(apps, schema_editor):
    relabel_content_type(apps, schema_editor, old="audit", new="registry")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("registry", "0003_traffic_policy"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AuditEvent",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("actor_name", models.CharField(blank=True, max_length=150)),
                        ("action", models.CharField(db_index=True, max_length=64)),
                        ("object", models.CharField(db_index=True, max_length=256)),
                        ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                        ("detail", models.JSONField(blank=True, default=dict)),
                        (
                            "actor",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "registry_auditevent",
                        "ordering": ["-created_at", "-id"],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(relabel_content_type, restore_content_type),
    ]
