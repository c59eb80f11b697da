"""Another user's copy of a session keeps none of its origin (issue 42, finding 6): share forks
and admin forks made before kept the source's URL, branch, commit and ssh host key, and their
clone message named the URL. Each of those made by someone other than the source's owner (or
whose source is gone, so no one can tell) now says only how it was made, as a new one does."""

import re

from django.db import migrations

COUNTS = re.compile(r": ([\d,]+ files, [\d,]+ bytes\.)$")


def withheld(text: str) -> str:
    counts = COUNTS.search(text or "")
    tail = f": {counts[1]}" if counts else "."
    return f"Cloned a repository (its address stays with the owner){tail}"


def withhold_origins(apps, schema_editor) -> None:  # noqa: ANN001
    Session = apps.get_model("sessions_app", "Session")
    Part = apps.get_model("sessions_app", "Part")
    copies = Session.objects.filter(lineage_kind__in=("share", "admin")).select_related(
        "forked_from_session"
    )
    for session in copies.iterator():
        source = session.forked_from_session
        if source is not None and source.owner_id == session.owner_id:
            continue  # the owner's own fork keeps its origin
        if session.source != {"type": session.lineage_kind}:
            session.source = {"type": session.lineage_kind}
            session.save(update_fields=["source"])
        for part in Part.objects.filter(session=session, type="text", data__source="git"):
            part.text = withheld(part.text)
            part.save(update_fields=["text"])


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0014_credential_port"),
    ]

    operations = [migrations.RunPython(withhold_origins, migrations.RunPython.noop)]
