"""Input that no text column can store: NUL characters. PostgreSQL refuses them (a 500 if it
reached the database; found by the fuzzer), so they are turned away at the door with a 400:
in JSON bodies (the API's parser), and in the path, the query string and form bodies (a
middleware, for the pages and the API alike)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import unquote_to_bytes

from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from .errors import error_body

MESSAGE = "Text must not contain NUL characters."
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):  # noqa: ANN001, ANN201
        data = super().parse(stream, media_type, parser_context)
        if _has_nul(data):
            raise ParseError(MESSAGE)
        return data


class NulGuardMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        query = request.META.get("QUERY_STRING", "")
        bad = "\x00" in request.path or b"\x00" in unquote_to_bytes(query)
        if not bad and request.content_type in FORMS:
            bad = any("\x00" in v for _, values in request.POST.lists() for v in values)
        if bad:
            if request.path.startswith("/api/"):
                return JsonResponse(error_body("ValidationError", MESSAGE), status=400)
            return HttpResponse(MESSAGE, status=400, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
