"""The worker host that last executed a run (issue 45, step 1); blank for runs of before."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs_app", "0007_lease_epoch"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="host",
            field=models.CharField(blank=True, default="", max_length=100),
        ),
    ]
