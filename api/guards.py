"""Input turned away at the door with a 400, before anything recurses over it or stores it.

NUL characters: PostgreSQL refuses them in text (a 500 if it reached the database; found by
the fuzzer): in JSON bodies (the API's parser), and in the path, the query string and form
bodies (a middleware, for the pages and the API alike).

Deep nesting: ``json`` decodes, and DRF fields, serializers and ``jsonschema`` walk, nested
values recursively; a body nested a few hundred levels deep ended in a RecursionError (a 500,
issue 12). The parser measures the depth on the raw text, iteratively, before decoding."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote_to_bytes

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework import renderers
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding

from .errors import error_body

MESSAGE = "Text must not contain NUL characters."
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")
# Far above what any request of the API needs (a run's output_schema is the deepest, a
# handful of levels), far below what Python's recursion limit lets the walkers reach.
MAX_JSON_DEPTH = 64
DEPTH_MESSAGE = f"The JSON body is nested deeper than {MAX_JSON_DEPTH} levels."

# A JSON string literal (escapes included) and runs of anything that is not a bracket: what
# is left after removing both is the document's bracket structure.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON ``text`` nests arrays/objects deeper than ``limit``; no recursion.
    Malformed text is measured as well as it can be; the decoder refuses it afterwards."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if len(brackets) <= limit:
        return False
    depth = 0
    for char in brackets:
        if char in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


SURROGATE_MESSAGE = "Text must not contain lone surrogates (\\ud800-\\udfff)."


def unstorable_text(value: Any) -> str | None:
    """Why the first string in ``value`` cannot be stored (PostgreSQL refuses NUL characters
    and lone surrogates in text: a 500 if they reached it), or None. Iterative: the depth
    bound makes recursion safe today, but this walk must not fall over if the bound moves."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return MESSAGE
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return SURROGATE_MESSAGE
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):  # noqa: ANN001, ANN201
        raw = stream.read() if stream is not None else b""
        # DRF's choice of charset: text codecs only (a bytes codec could inflate the body).
        encoding = get_encoding(parser_context or {})
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
        if json_too_deep(text):
            raise ParseError(DEPTH_MESSAGE)
        data = super().parse(io.BytesIO(raw), media_type, parser_context)
        problem = unstorable_text(data)
        if problem:
            raise ParseError(problem)
        return data


class NulGuardMiddleware:
    """Sync and async: under ASGI a middleware that is only synchronous would put every
    request (a ``wait: true`` one for minutes) on a thread of its own."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if iscoroutinefunction(self):
            return self.__acall__(request)
        return self._refusal(request) or self.get_response(request)

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        if request.content_type in FORMS:
            # Parsing a form (an upload) reads its body: on a thread, not on the loop.
            refusal = await sync_to_async(self._refusal)(request)
        else:
            refusal = self._refusal(request)
        return refusal or await self.get_response(request)

    @staticmethod
    def _refusal(request: HttpRequest) -> HttpResponse | None:
        query = request.META.get("QUERY_STRING", "")
        bad = "\x00" in request.path or b"\x00" in unquote_to_bytes(query)
        if not bad and request.content_type in FORMS:
            bad = any("\x00" in v for _, values in request.POST.lists() for v in values)
        if not bad:
            return None
        if request.path.startswith("/api/"):
            return JsonResponse(error_body("ValidationError", MESSAGE), status=400)
        return HttpResponse(MESSAGE, status=400, content_type="text/plain; charset=utf-8")


class JSONRenderer(renderers.JSONRenderer):
    """DRF's renderer, for answers that may hold a name of the worktree's: a file name is any
    bytes but ``/`` and NUL, and git's names that are not UTF-8 are decoded with
    ``surrogateescape`` (lone surrogates, which UTF-8 cannot encode: the render was a 500 for
    a diff of a worktree holding such a file, issue 42). Such an answer is written with
    ``\\uXXXX`` escapes instead: valid JSON, the bytes of the name kept as escapes."""

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:  # noqa: ANN001
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            self.ensure_ascii = True
            try:
                return super().render(data, accepted_media_type, renderer_context)
            finally:
                del self.ensure_ascii
