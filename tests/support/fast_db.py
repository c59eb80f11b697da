"""What makes the suite's database work cheaper without changing what it tests.

* ``FastPBKDF2PasswordHasher``: Django's own hasher with fewer rounds. Its hashes keep the
  ``pbkdf2_sha256`` name and carry their round count, so every server the suite starts (with
  the shipped hashers) checks them, and it checks theirs. The shipped 1,000,000 rounds cost
  a quarter of a second a user: most tests make two.
* ``empty_tables``: a transactional test's teardown that deletes every row instead of
  Django's ``flush`` (a ``TRUNCATE`` of every table, then ``post_migrate`` making the content
  types and permissions again: about 0.2–0.4 s a test, on about a thousand tests). The
  content types, permissions and migration records stay as migrated; everything else goes,
  in one transaction with the foreign keys checked at its end."""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.db import connections, transaction

KEPT = frozenset({"django_migrations", "django_content_type", "auth_permission"})


class FastPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1_000


_tables: dict[str, list[str]] = {}


def _emptied(db_name: str) -> list[str]:
    if db_name not in _tables:
        connection = connections[db_name]
        names = connection.introspection.django_table_names(only_existing=True, include_views=False)
        _tables[db_name] = sorted(set(names) - KEPT)
    return _tables[db_name]


def empty_tables(self) -> None:  # noqa: ANN001 - TransactionTestCase._fixture_teardown
    for db_name in self._databases_names(include_mirrors=False):
        connection = connections[db_name]
        quote = connection.ops.quote_name
        with transaction.atomic(using=db_name), connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("SET CONSTRAINTS ALL DEFERRED")
            for table in _emptied(db_name):
                cursor.execute(f"DELETE FROM {quote(table)}")
