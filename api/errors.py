"""One JSON error shape for every failure: ``{"error": {"type", "message"}}``."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.db import InterfaceError, OperationalError
from django.http import Http404, JsonResponse
from django.views.defaults import bad_request, page_not_found, server_error
from rest_framework import exceptions
from rest_framework.response import Response

from core.errors import AppError
from workspace.snapshots import SnapshotError

log = logging.getLogger(__name__)


# The code of a serializer error whose message is a whole sentence that names its field (the
# contract's wording: "messages is required in prompt mode."): shown as it is, not prefixed
# with the field's name as DRF's generic messages ("This field is required.") are.
SENTENCE = "sentence"


def error_body(type: str, message: str) -> dict[str, Any]:
    return {"error": {"type": type, "message": message}}


def _first_message(detail: Any) -> str:
    text, _sentence = _first(detail)
    return text


def _first(detail: Any) -> tuple[str, bool]:
    """The first error of a DRF error tree, as the message, and whether it is a sentence."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            text, sentence = _first(value)
            if sentence or key in ("non_field_errors", "detail"):
                return text, sentence
            return f"{key}: {text}", False
    if isinstance(detail, list) and detail:
        return _first(detail[0])
    text = str(detail)
    sentence = getattr(detail, "code", None) == SENTENCE
    return (text if text.endswith(".") else text + "."), sentence


def _bad_request_message(exc: BaseException | None) -> str:
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return f"The request body is larger than the limit of {limit:,} bytes."
    return "The request is malformed."


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | JsonResponse | None:
    response = _error_response(exc)
    if response is None:
        return None
    media_type = getattr(context.get("request"), "accepted_media_type", None) or ""
    if not media_type.startswith("application/json"):
        # DRF renders an error with the view's renderer, or its first one when negotiation
        # failed (``?format=bogus``): the schema view would answer the error in YAML.
        return JsonResponse(response.data, status=response.status_code)
    return response


def _error_response(exc: Exception) -> Response | None:
    if isinstance(exc, SuspiciousOperation):
        # Django's refusals of a body (over DATA_UPLOAD_MAX_MEMORY_SIZE, too many fields)
        # surface from ``request.data`` inside the view; Django would answer its HTML 400.
        return Response(error_body("ValidationError", _bad_request_message(exc)), status=400)
    if isinstance(exc, AppError):
        retry_after = getattr(exc, "retry_after", None)
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
        body = error_body(exc.type, exc.message)
        if getattr(exc, "resets_at", None):
            body["error"]["resets_at"] = exc.resets_at
        return Response(body, status=exc.status_code, headers=headers)
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
    if isinstance(exc, SnapshotError):
        # The worktree could not be read or written by git: what it holds is the agent's
        # (issue 42: no content answers 5xx). Nothing of the request was stored; the chat's
        # shell can repair the worktree. Logged whole for the operator (a full disk, a git
        # that hung past SNAPSHOT_GIT_TIMEOUT_SECONDS).
        log.warning("worktree error: %s", exc)
        detail = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else "git failed"
        return Response(
            error_body(
                "WorktreeError",
                f"The worktree could not be read ({detail}). Nothing was changed: try again, "
                "or repair the worktree from the chat.",
            ),
            status=409,
        )
    if isinstance(exc, OperationalError | InterfaceError):
        # The database went away under the request (a restart, a killed connection): nothing
        # of it was committed; the client may try again (Django drops the broken connection).
        log.warning("database unavailable during %s", exc.__class__.__name__)
        return Response(
            error_body("ServiceUnavailable", "The database is not reachable now; try again."),
            status=503,
            headers={"Retry-After": "1"},
        )
    return None


def json_400(request, exception=None):  # noqa: ANN001, ANN201
    """``handler400``: what Django refuses outside a DRF view (a middleware reading a form
    body over the limit, too many fields, a bad Host) answers in the JSON shape under /api/."""
    if request.path.startswith("/api/"):
        return JsonResponse(
            error_body("ValidationError", _bad_request_message(exception)), status=400
        )
    return bad_request(request, exception)


def json_404(request, exception=None):  # noqa: ANN001, ANN201
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("NotFound", "Not found."), status=404)
    return page_not_found(request, exception)


def json_500(request):  # noqa: ANN001, ANN201
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("ServerError", "Internal error."), status=500)
    return server_error(request)
