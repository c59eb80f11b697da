"""Draining a host (issue 45, step 4: ``manage.py drain_host``): new sessions are no longer
placed on it."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0017_replicated_snapshots"),
    ]

    operations = [
        migrations.AddField(
            model_name="host",
            name="draining",
            field=models.BooleanField(default=False),
        ),
    ]
