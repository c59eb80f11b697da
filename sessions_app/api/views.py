"""Session endpoints: thin views (validate → one service → serialize). Each ViewSet fetches
and authorizes its object once, in ``get_object()``; the routes are in ``config/urls.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import FileResponse, HttpResponse, StreamingHttpResponse
from django.utils.http import content_disposition_header
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from api.base import ApiViewSet, FormatIsTheViewsOwn
from core import models_catalog

from .. import host_calls
from ..models import Part, Share
from ..selectors import (
    lineage,
    message_data,
    message_page,
    message_tree,
    page_limit,
    part_data,
    part_for_user,
    session_data,
    session_message_ids,
    sessions_for_user,
    worktree_entry,
)
from ..services import changes as change_services
from ..services import downloads, sharing
from ..services import sessions as session_services
from .base import SessionScopedViewSet
from .serializers.files import (
    DIFF_OUT,
    ArchiveQueryIn,
    DiffQueryIn,
    FileQueryIn,
    PatchQueryIn,
    WorktreeEntryOut,
)
from .serializers.messages import MessagePageOut, MessagesQueryIn, TreeEntryOut, part_out
from .serializers.sessions import (
    HeadIn,
    LineageOut,
    ModelsOut,
    RevertIn,
    RollbackIn,
    SessionIn,
    SessionOut,
    SessionPageOut,
    SessionPatchIn,
    SessionsQueryIn,
)
from .serializers.sharing import SharedOut, SharedQueryIn, ShareIn, ShareLinkOut

TEXT = "text/plain; charset=utf-8"
# A file's content is text/plain, a directory's listing JSON (the same route).
FILE_OR_LISTING = {
    (200, "application/json"): WorktreeEntryOut(many=True),
    (200, "text/plain"): OpenApiTypes.STR,
}


class SessionPages(CursorPagination):
    ordering = "-id"
    page_size_query_param = "limit"

    def get_page_size(self, request: Request) -> int:
        return page_limit(request.query_params.get(self.page_size_query_param))


def page_links(request: Request, *, before: str | None, after: str | None) -> dict[str, object]:
    """``next``/``previous`` of a message page: the links keep the request's other
    parameters."""
    url = request.build_absolute_uri()
    url = remove_query_param(remove_query_param(url, "before"), "after")
    return {
        "next": replace_query_param(url, "after", after) if after else None,
        "previous": replace_query_param(url, "before", before) if before else None,
    }


class SessionViewSet(SessionScopedViewSet):
    # ``/api/sessions/`` and the moves on one session.

    @extend_schema(parameters=[SessionsQueryIn], responses={200: SessionPageOut})
    def list(self, request: Request) -> Response:
        query = self.query(SessionsQueryIn)
        pages = SessionPages()
        page = pages.paginate_queryset(sessions_for_user(request.user, query["q"]), request)
        return pages.get_paginated_response([session_data(s) for s in page])

    @extend_schema(request=SessionIn, responses={201: SessionOut})
    def create(self, request: Request) -> Response:
        args = self.body(SessionIn)
        session = session_services.create_session(owner=request.user, **args)
        return Response(session_data(session), status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: SessionOut})
    def retrieve(self, request: Request, session_id: str) -> Response:
        return Response(session_data(self.get_object()))

    @extend_schema(request=SessionPatchIn, responses={200: SessionOut})
    def partial_update(self, request: Request, session_id: str) -> Response:
        session = self.get_object()
        args = self.body(SessionPatchIn)
        return Response(session_data(session_services.update_session(session=session, **args)))

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, session_id: str) -> Response:
        session_services.delete_session(session=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(parameters=[MessagesQueryIn], responses={200: MessagePageOut})
    def messages(self, request: Request, session_id: str) -> Response:
        """The active path (or ``?tree=1``: every message), a page at a time: the first page is
        the one nearest the head, in root → head order; ``previous`` leads to older ones."""
        session = self.get_object()
        query = self.query(MessagesQueryIn)
        page = message_page(
            session_message_ids(session, tree=query["tree"]),
            limit=query["limit"],
            before=query["before"] or None,
            after=query["after"] or None,
        )
        return Response(
            {
                "results": [message_data(m) for m in page.messages],
                **page_links(request, before=page.before, after=page.after),
            }
        )

    @extend_schema(request=HeadIn, responses={200: SessionOut})
    def head(self, request: Request, session_id: str) -> Response:
        session = self.get_object()
        message_id = self.body(HeadIn)["message_id"]
        session = host_calls.call("head", session=session, message_id=message_id, user=request.user)
        return Response(session_data(session))

    @extend_schema(responses={200: WorktreeEntryOut(many=True)})
    def files(self, request: Request, session_id: str) -> Response | FileResponse:
        """The worktree's files (``.git`` aside; at most ``API_FILES_MAX``)."""
        if self.query(FileQueryIn)["not_kept"]:
            return Response(downloads.not_kept_now(self.get_object()))
        return self.file(request, session_id, path="")

    @extend_schema(operation_id="sessions_files_path_retrieve", responses=FILE_OR_LISTING)
    def file(self, request: Request, session_id: str, path: str) -> Response | FileResponse:
        """A file's content (``?download=1``: as an attachment, its bytes as they are), or a
        directory's listing."""
        download = self.query(FileQueryIn)["download"]
        found = worktree_entry(self.get_object(), path)
        if isinstance(found, list):
            return Response(found)
        if download:
            name = path.rstrip("/").rsplit("/", 1)[-1]
            return FileResponse(
                found, as_attachment=True, filename=name, content_type="application/octet-stream"
            )
        return FileResponse(found, content_type=TEXT)

    @extend_schema(request=RevertIn, responses={200: SessionOut})
    def revert(self, request: Request, session_id: str) -> Response:
        session = self.get_object()
        args = self.body(RevertIn)
        session = host_calls.call("revert", session=session, user=request.user, **args)
        return Response(session_data(session))

    @extend_schema(request=None, responses={200: SessionOut})
    def unrevert(self, request: Request, session_id: str) -> Response:
        session = host_calls.call("unrevert", session=self.get_object(), user=request.user)
        return Response(session_data(session))

    @extend_schema(request=None, responses={200: SessionOut})
    def cleanup(self, request: Request, session_id: str) -> Response:
        session = host_calls.call("cleanup", session=self.get_object(), user=request.user)
        return Response(session_data(session))

    @extend_schema(parameters=[DiffQueryIn], responses={200: DIFF_OUT})
    def diff(self, request: Request, session_id: str) -> Response:
        """The files changed in the session (or in the turn of ``message_id``); with ``file``,
        that file's unified diff."""
        session = self.get_object()
        query = self.query(DiffQueryIn)
        message_id = query["message_id"] or None
        if "file" in query:
            return Response(
                change_services.session_file_diff(
                    session=session, file=query["file"], message_id=message_id
                )
            )
        return Response(change_services.session_diff(session=session, message_id=message_id))

    @extend_schema(request=RollbackIn, responses={200: SessionOut})
    def rollback(self, request: Request, session_id: str) -> Response:
        session = self.get_object()
        num_turns = self.body(RollbackIn)["num_turns"]
        session = host_calls.call(
            "rollback", session=session, num_turns=num_turns, user=request.user
        )
        return Response(session_data(session))

    @extend_schema(responses={200: LineageOut})
    def lineage(self, request: Request, session_id: str) -> Response:
        return Response(lineage(self.get_object(), request.user))

    @extend_schema(responses={200: TreeEntryOut(many=True)})
    def tree(self, request: Request, session_id: str) -> Response:
        """Every message's id, parent, role, run and hidden flag: the shape of the tree."""
        return Response(message_tree(self.get_object()))

    @extend_schema(request=ShareIn, responses={201: ShareLinkOut})
    def share(self, request: Request, session_id: str) -> Response:
        """Pin the head and the files for a link (again: move the pin)."""
        session = self.get_object()
        args = self.body(ShareIn)
        share = sharing.share_session(session=session, user=request.user, **args)
        return Response(sharing.share_link(share), status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: ShareLinkOut, 204: None})
    def shared_link(self, request: Request, session_id: str) -> Response:
        """The session's live link, its URL and when it was pinned; 204 when it has none."""
        share = sharing.live_share(self.get_object())
        if share is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(sharing.share_link(share))

    @extend_schema(responses={204: None})
    def unshare(self, request: Request, session_id: str) -> Response:
        """Revoke the link: its token then answers 404."""
        sharing.revoke_share(session=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class ModelViewSet(ApiViewSet):
    @extend_schema(responses={200: ModelsOut})
    def list(self, request: Request) -> Response:
        """The models a session may pick (``AGENT_MODELS``), and the default."""
        return Response(
            {
                "default": settings.AGENT_MODEL,
                "results": [m.data() for m in models_catalog.catalogue()],
            }
        )


class PartViewSet(ApiViewSet):
    def get_object(self) -> Part:
        return part_for_user(self.request.user, self.kwargs["part_id"])

    @extend_schema(responses={200: part_out()})
    def retrieve(self, request: Request, part_id: str) -> Response:
        """One part whole: what lists and events cut at ``API_PART_FIELD_MAX``."""
        return Response(part_data(self.get_object(), whole=True))


class SharedViewSet(ApiViewSet):
    # ``/api/shared/{token}/``: what a share link shows, read-only. The token is the
    # authorization; reading needs a login unless ``SHARE_ANONYMOUS_READ``.

    permission_classes = [AllowAny]

    def get_object(self) -> Share:
        return sharing.share_for_token(self.kwargs["token"], self.request.user)

    @extend_schema(parameters=[SharedQueryIn], responses={200: SharedOut})
    def retrieve(self, request: Request, token: str) -> Response:
        """The pinned conversation (a page of it, nearest the pin first) and its files."""
        share = self.get_object()
        query = self.query(SharedQueryIn)
        data = sharing.shared_data(share, limit=query["limit"], before=query["before"] or None)
        before = data.pop("previous_before")
        url = remove_query_param(request.build_absolute_uri(), "before")
        data["previous"] = replace_query_param(url, "before", before) if before else None
        return Response(data)

    @extend_schema(responses={(200, "text/plain"): OpenApiTypes.STR})
    def files(self, request: Request, token: str, path: str) -> HttpResponse:
        share = self.get_object()
        return HttpResponse(sharing.shared_file(share, path), content_type=TEXT)


async def _chunks(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """A sync generator of chunks served as an async one: under ASGI, Django would read a
    sync one whole into memory before sending a byte. Each chunk is made in a thread (git,
    compression), none of it on the server's loop."""
    done = object()
    while True:
        chunk = await sync_to_async(next, thread_sensitive=False)(chunks, done)
        if chunk is done:
            return
        if chunk:
            yield chunk


def _attachment(response: HttpResponse, name: str, not_kept: int) -> HttpResponse:
    response["Content-Disposition"] = content_disposition_header(True, name)
    # Files the snapshots do not keep are listed inside the download (its comment, its
    # preamble); their number here.
    response["X-Not-Kept-Count"] = str(not_kept)
    return response


class SessionDownloadViewSet(SessionScopedViewSet):
    # ``GET /api/sessions/{id}/archive/`` and ``…/patch/``: the owner's work, out.

    content_negotiation_class = FormatIsTheViewsOwn

    @extend_schema(
        parameters=[ArchiveQueryIn],
        responses={
            (200, "application/zip"): OpenApiTypes.BINARY,
            (200, "application/gzip"): OpenApiTypes.BINARY,
        },
    )
    def archive(self, request: Request, session_id: str) -> StreamingHttpResponse:
        """The worktree at a point (``message_id``, any branch; default the head) as it
        was recorded there: a ``.zip`` or a ``.tar.gz``, streamed."""
        session = self.get_object()
        query = self.query(ArchiveQueryIn)
        at = downloads.point(session, query["message_id"] or None)
        chunks = downloads.archive(session, at, query["format"])
        kind = "application/zip" if query["format"] == "zip" else "application/gzip"
        response = StreamingHttpResponse(_chunks(chunks), content_type=kind)
        name = downloads.download_name(session, query["format"])
        return _attachment(response, name, len(at.not_kept))

    @extend_schema(
        parameters=[PatchQueryIn],
        responses={
            (200, "text/x-diff"): OpenApiTypes.STR,
            (200, "application/mbox"): OpenApiTypes.STR,
        },
    )
    def patch(self, request: Request, session_id: str) -> StreamingHttpResponse:
        """The change from ``from`` (default: the session's start) to ``to`` (default: the
        head) on one branch: a unified diff (``git apply``) or one commit per user turn
        (``git am``), streamed as git writes it; one too large is refused before."""
        session = self.get_object()
        query = self.query(PatchQueryIn)
        chunks, not_kept = downloads.patch(
            session,
            from_id=query["from"] or None,
            to_id=query["to"] or None,
            fmt=query["format"],
            author=request.user.get_username(),
        )
        kind = "text/x-diff" if query["format"] == "diff" else "application/mbox"
        response = StreamingHttpResponse(_chunks(chunks), content_type=kind)
        name = downloads.download_name(session, "diff" if query["format"] == "diff" else "mbox")
        return _attachment(response, name, not_kept)
