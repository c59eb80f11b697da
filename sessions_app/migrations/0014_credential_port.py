"""A credential is sent to one scheme, host and port (issue 42, finding 8). Those saved before
named a host only: each is for its kind's default port from now on (443 for a token, 22 for an
ssh key), the port a URL without one uses; one for another port must be saved again with it."""

from django.db import migrations, models

DEFAULT_PORTS = {"token": 443, "ssh_key": 22}


def default_ports(apps, schema_editor) -> None:  # noqa: ANN001
    Credential = apps.get_model("sessions_app", "Credential")
    for kind, port in DEFAULT_PORTS.items():
        Credential.objects.filter(kind=kind, port__isnull=True).update(port=port)
    Credential.objects.filter(port__isnull=True).update(port=443)


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0013_lineage_kind"),
    ]

    operations = [
        migrations.AddField(
            model_name="credential",
            name="port",
            field=models.PositiveIntegerField(null=True),
        ),
        migrations.RunPython(default_ports, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="credential",
            name="port",
            field=models.PositiveIntegerField(),
        ),
    ]
