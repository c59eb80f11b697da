"""On PostgreSQL, Django adds a ``varchar_pattern_ops`` index (``…_like``) beside the index of
every indexed CharField, for ``LIKE 'prefix%'``. Our ids (primary keys and the columns that
hold them) are never searched by prefix, so on the history tables, which every checkpoint
and every fork writes, each of them is pure write cost. Nothing is dropped elsewhere."""

from django.db import migrations

TABLES = ("sessions_app_message", "sessions_app_part", "runs_app_run")


def drop_like_indexes(apps, schema_editor):  # noqa: ANN001, ANN201
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = ANY(%s) AND indexname LIKE %s",
            [list(TABLES), "%\\_like"],
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f'DROP INDEX IF EXISTS "{name}"')


class Migration(migrations.Migration):
    dependencies = [
        ("runs_app", "0003_covered_fk_indexes"),
        ("sessions_app", "0004_covered_fk_indexes"),
    ]

    operations = [migrations.RunPython(drop_like_indexes, migrations.RunPython.noop)]
