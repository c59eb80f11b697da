"""docs/api.md and the OpenAPI schema name the same endpoints.

The schema (drf-spectacular, served at ``/api/schema/`` and drawn by the Swagger UI at
``/api/docs/``) is the reference for fields; docs/api.md says what the calls mean. So that the
two cannot drift apart, every method and path of the schema has an entry in docs/api.md, and
every endpoint docs/api.md names is one the schema has.

An entry is a line that begins with the call in a code span: a row of a call table
(``| `POST /api/sessions/{id}/fork/` | …``), a paragraph or a list item
(``* `GET /api/models/` → …``).
A call named anywhere else in a code span (``see `GET /api/runs/{id}/` ``) must exist too.
Path parameters are compared by place, not name: ``{id}``, ``{session_id}`` and ``<path>`` are
one parameter; a query string or a body after the path is not part of it.
"""

from __future__ import annotations

import re
from pathlib import Path

from drf_spectacular.generators import SchemaGenerator

ROOT = Path(__file__).resolve().parent.parent
API_DOC = ROOT / "docs" / "api.md"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

# Documented under /api/ but not drawn from a DRF view, so the schema cannot hold them.
OUTSIDE_THE_SCHEMA = {
    ("GET", "/api/health/"): "a plain Django view for monitors (runs_app/health.py)",
    ("GET", "/api/docs/"): "the Swagger UI page that draws the schema",
}

CALL = re.compile(r"`(" + "|".join(METHODS) + r") (/api/[^\s`?]*)[^`]*`")
ENTRY = re.compile(r"^(?:\|\s*|\*\s+)?" + CALL.pattern)


def normalised(path: str) -> str:
    """``path`` with each parameter (``{id}``, ``{session_id}``, ``<path>``) written ``{}``."""
    return re.sub(r"\{[^}/]*\}|<[^>/]*>", "{}", path)


def schema_calls() -> set[tuple[str, str]]:
    """Every (method, path) of the schema the API serves, built in-process."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return {
        (method.upper(), normalised(path))
        for path, operations in schema["paths"].items()
        for method in operations
        if method.upper() in METHODS
    }


def doc_calls() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """The calls docs/api.md has entries for, and every call it names, code blocks left out."""
    entries: set[tuple[str, str]] = set()
    named: set[tuple[str, str]] = set()
    in_block = False
    for line in API_DOC.read_text().splitlines():
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            continue
        if match := ENTRY.match(line):
            entries.add((match.group(1), normalised(match.group(2))))
        named |= {(m.group(1), normalised(m.group(2))) for m in CALL.finditer(line)}
    return entries, named


def test_every_endpoint_of_the_schema_has_an_entry_in_docs_api_md():
    entries, _ = doc_calls()
    missing = sorted(schema_calls() - entries)
    assert not missing, (
        f"docs/api.md has no entry (a line beginning with the call in a code span) for {missing}"
    )


def test_docs_api_md_names_no_call_the_schema_lacks():
    _, named = doc_calls()
    unknown = sorted(named - schema_calls() - set(OUTSIDE_THE_SCHEMA))
    assert not unknown, f"docs/api.md names calls the API does not serve: {unknown}"


def test_what_is_outside_the_schema_is_documented_and_truly_outside():
    entries, _ = doc_calls()
    assert not set(OUTSIDE_THE_SCHEMA) & schema_calls(), "now in the schema: drop it from the list"
    assert set(OUTSIDE_THE_SCHEMA) <= entries


def test_the_entry_reader_reads_table_rows_and_paragraphs_and_normalises_parameters():
    assert ENTRY.match("| `POST /api/sessions/{id}/fork/` | `{title?}` | `201` |")
    assert ENTRY.match("`GET /api/sessions/{id}/blame/<path>?message_id=<id>` → `200`")
    assert ENTRY.match("* `GET /api/health/` (no login) → `200` or `503`")
    assert not ENTRY.match("Cancel (`POST /api/runs/{id}/cancel/`) ends it")
    assert normalised("/api/sessions/{session_id}/files/{path}") == normalised(
        "/api/sessions/{id}/files/<path>"
    )
