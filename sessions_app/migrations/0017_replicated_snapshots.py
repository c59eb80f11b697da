"""Replicated snapshots (issue 45, step 2): what the central store last received of a
session (``sessions_app/replicas.py``); blank for every session until its first push."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0016_hosts"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="replicated_commit",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="session",
            name="replicated_snapshot",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="session",
            name="replicated_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
