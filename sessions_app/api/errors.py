"""One JSON error shape for every failure: ``{"error": {"type", "message"}}``."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response

from ..errors import AppError

log = logging.getLogger(__name__)


def error_body(type: str, message: str) -> dict[str, Any]:
    return {"error": {"type": type, "message": message}}


def _first_message(detail: Any) -> str:
    if isinstance(detail, dict):
        for key, value in detail.items():
            text = _first_message(value)
            if key in ("non_field_errors", "detail"):
                return text
            return f"{key}: {text}"
    if isinstance(detail, list) and detail:
        return _first_message(detail[0])
    text = str(detail)
    return text if text.endswith(".") else text + "."


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, AppError):
        return Response(error_body(exc.type, exc.message), status=exc.status_code)
    if isinstance(exc, Http404):
        message = str(exc) if str(exc) and "matches the given query" not in str(exc) else ""
        return Response(error_body("NotFound", message or "Not found."), status=404)
    if isinstance(exc, PermissionDenied):
        return Response(error_body("PermissionDenied", "Permission denied."), status=403)
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        response = Response(error_body("NotAuthenticated", _first_message(exc.detail)), status=401)
        return response
    if isinstance(exc, exceptions.ValidationError | exceptions.ParseError):
        return Response(error_body("ValidationError", _first_message(exc.detail)), status=400)
    if isinstance(exc, exceptions.MethodNotAllowed):
        return Response(error_body("MethodNotAllowed", _first_message(exc.detail)), status=405)
    if isinstance(exc, exceptions.UnsupportedMediaType):
        return Response(error_body("ValidationError", _first_message(exc.detail)), status=415)
    if isinstance(exc, exceptions.APIException):
        name = exc.__class__.__name__
        return Response(error_body(name, _first_message(exc.detail)), status=exc.status_code)
    return None


def json_404(request, exception=None):  # noqa: ANN001, ANN201
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("NotFound", "Not found."), status=404)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


def json_500(request):  # noqa: ANN001, ANN201
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("ServerError", "Internal error."), status=500)
    from django.views.defaults import server_error

    return server_error(request)
