"""The import's body parser: an export is far larger than the API's other bodies, so this one
endpoint reads up to ``IMPORT_MAX_BODY_BYTES`` instead of ``DATA_UPLOAD_MAX_MEMORY_SIZE``
(DRF reads a ``JSONParser``'s body through ``request.body``, which enforces the latter, so
this parser is not one: it reads the stream itself, with its own bound).

Otherwise it refuses what ``StrictJSONParser`` refuses (NUL characters, nesting past a
bound, checked on the raw text before decoding), and more that the database would refuse
later as a 500: lone surrogates (``"\\ud800"``, which UTF-8 cannot encode) and numbers past
what JSON columns take (``1e999`` decodes to infinity)."""

from __future__ import annotations

import json
import math
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, get_encoding

from api.guards import MAX_JSON_DEPTH, json_too_deep, unstorable_text

# An export nests a message's parts' tool state inside the document: a few levels more than
# the other bodies, around whatever the tools' input held.
MAX_DEPTH = MAX_JSON_DEPTH + 16


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class ImportJSONParser(BaseParser):
    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):  # noqa: ANN001, ANN201
        limit = settings.IMPORT_MAX_BODY_BYTES
        too_large = f"The request body is larger than the limit of {limit:,} bytes."
        request = (parser_context or {}).get("request")
        meta = getattr(request, "META", {})
        try:
            declared = int(meta.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > limit:
            raise ParseError(too_large)
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise ParseError(too_large)
        encoding = get_encoding(parser_context or {})
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
        if json_too_deep(text, MAX_DEPTH):
            raise ParseError(f"The JSON body is nested deeper than {MAX_DEPTH} levels.")
        try:
            data = json.loads(text, parse_float=_finite, parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
        problem = unstorable_text(data)
        if problem:
            raise ParseError(problem)
        return data
