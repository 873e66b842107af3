from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("registry", "0004_auditevent_moved_to_audit"),
    ]

    operations = [
        migrations.AddField(
            model_name="registeredmodel",
            name="on_demand",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="registeredmodel",
            name="pinned",
            field=models.BooleanField(default=False),
        ),
    ]
