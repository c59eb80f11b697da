"""Repositories in and out (docs/repositories.md): the upload of an
archive or a folder, the push of a session's work, and the caller's saved credentials. Thin
views: ``repositories.fill`` (through ``repositories.upload_store``), ``repositories.push``
and ``repositories.credentials`` hold the logic."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from api.base import ApiViewSet
from core.errors import AppError, InvalidInput

from ..repositories import credentials as credential_services
from ..repositories import push as repo_push
from ..repositories import upload_store
from ..selectors import session_data
from ..services import sessions as session_services
from .base import SessionScopedViewSet
from .serializers.repositories import CredentialIn, CredentialOut, PushIn, PushOut
from .serializers.sessions import SessionOut

MULTIPART_OVERHEAD = 1024 * 1024


class PayloadTooLarge(AppError):
    status_code = 413
    type = "PayloadTooLarge"


class UploadViewSet(ApiViewSet):
    # ``POST /api/sessions/upload/``: a new session from an archive or a dropped folder.

    parser_classes = [MultiPartParser]

    @extend_schema(
        request={
            "multipart/form-data": {
                "type": "object",
                "properties": {
                    "file": {"type": "string", "format": "binary"},
                    "files": {"type": "array", "items": {"type": "string", "format": "binary"}},
                    "paths": {"type": "array", "items": {"type": "string"}},
                    "title": {"type": "string"},
                    "strip_top_folder": {
                        "type": "boolean",
                        "description": "Drop the upload's single top-level folder (proj/a.txt"
                        " becomes a.txt); refused (400) when its top holds anything else.",
                    },
                },
            }
        },
        responses={201: SessionOut},
    )
    def create(self, request: Request) -> Response:
        """``file``: a ``.zip``, ``.tar`` or ``.tar.gz``; or a folder: ``files`` with
        ``paths`` (each file's relative path, in the same order); ``strip_top_folder``: its
        single top-level folder dropped. Refused whole (400, one sentence) when any member is
        unsafe or a limit is passed."""
        length = request.META.get("CONTENT_LENGTH") or ""
        limit = settings.REPO_MAX_BYTES + MULTIPART_OVERHEAD if settings.REPO_MAX_BYTES else 0
        if not length.isdigit():
            raise InvalidInput("An upload needs a Content-Length.")
        if limit and int(length) > limit:
            raise PayloadTooLarge(
                f"The upload is larger than {settings.REPO_MAX_BYTES:,} bytes (REPO_MAX_BYTES)."
            )
        title = request.data.get("title") or ""
        if not isinstance(title, str) or len(title) > 200:
            raise InvalidInput("title must be at most 200 characters.")
        strip_top = _flag(request, "strip_top_folder")
        archive = request.FILES.get("file")
        files = request.FILES.getlist("files")
        if archive is not None and not files:
            name = archive.name or "upload"
            session = session_services.create_session(owner=request.user, title=title or name)
            session = upload_store.fill_upload(
                session=session, name=name, fileobj=archive, strip_top=strip_top
            )
        elif files and archive is None:
            paths = request.data.getlist("paths")
            if len(paths) != len(files):
                raise InvalidInput("paths must name each of the files, in the same order.")
            top = paths[0].split("/", 1)[0] if paths else ""
            session = session_services.create_session(
                owner=request.user, title=title or top or "Upload"
            )
            session = upload_store.fill_upload(
                session=session,
                name=top,
                files=list(zip(paths, files, strict=True)),
                strip_top=strip_top,
            )
        else:
            raise InvalidInput("Send one archive as file, or a folder as files with paths.")
        return Response(session_data(session), status=status.HTTP_201_CREATED)


def _flag(request: Request, name: str) -> bool:
    """A multipart boolean: ``true``/``false`` (or ``1``/``0``), absent is false."""
    value = request.data.get(name)
    if value in (None, "", "false", "0", False):
        return False
    if value in ("true", "1", True):
        return True
    raise InvalidInput(f"{name} must be true or false.")


class PushViewSet(SessionScopedViewSet):
    @extend_schema(request=PushIn, responses={200: PushOut})
    def push(self, request: Request, session_id: str) -> Response:
        """Push the session's work (one commit per user turn on top of the cloned commit) to
        its origin under ``branch``: never forced; 409 when that branch exists and would not
        fast-forward."""
        session = self.get_object()
        args = self.body(PushIn)
        result = repo_push.push(
            session=session,
            branch=args["branch"],
            credential_id=args["credential_id"] or None,
            user=request.user,
        )
        return Response(result)


class CredentialViewSet(ApiViewSet):
    # ``/api/credentials/``: the caller's own; the secret is write-only.

    @extend_schema(responses={200: CredentialOut(many=True)})
    def list(self, request: Request) -> Response:
        return Response(credential_services.credentials_of(request.user))

    @extend_schema(request=CredentialIn, responses={201: CredentialOut})
    def create(self, request: Request) -> Response:
        args = self.body(CredentialIn)
        credential = credential_services.save_credential(owner=request.user, **args)
        return Response(
            credential_services.credential_data(credential), status=status.HTTP_201_CREATED
        )

    @extend_schema(responses={204: None}, parameters=[], request=None)
    def destroy(self, request: Request, credential_id: str) -> Response:
        credential_services.delete_credential(owner=request.user, credential_id=credential_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
