"""Worker hosts and a session's home host (issue 45, step 1): ``Host`` holds each host's
heartbeat; ``Session.host`` is blank for the sessions of before (any host, as they ran)."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0015_share_forks_without_origin"),
    ]

    operations = [
        migrations.CreateModel(
            name="Host",
            fields=[
                ("name", models.CharField(max_length=100, primary_key=True, serialize=False)),
                ("started_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("last_heartbeat", models.DateTimeField(default=django.utils.timezone.now)),
                ("version", models.CharField(blank=True, default="", max_length=40)),
                ("pid", models.PositiveIntegerField(default=0)),
                ("workspace_root", models.CharField(blank=True, default="", max_length=500)),
                ("disk_total", models.BigIntegerField(default=0)),
                ("disk_free", models.BigIntegerField(default=0)),
            ],
            options={
                "ordering": ["name"],
            },
        ),
        migrations.AddField(
            model_name="session",
            name="host",
            field=models.CharField(blank=True, default="", max_length=100),
        ),
        migrations.AddIndex(
            model_name="session",
            index=models.Index(fields=["host"], name="sessions_ap_host_021d60_idx"),
        ),
    ]
