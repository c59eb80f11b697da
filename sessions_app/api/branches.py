"""Branches as workspaces (docs/semantics.md §14): compare two points of a
session. Thin views: the query validated by a serializer, one service call, the answer."""

from __future__ import annotations

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.serializers import Enum, Out, refuse

from ..selectors import session_for_user
from ..services import compare as compare_services
from .base import SessionScopedViewSet
from .serializers.files import FileDiffOut
from .serializers.messages import MessageOut


def _point(help_text: str, *, required: bool) -> serializers.CharField:
    return serializers.CharField(
        required=required,
        allow_blank=not required,
        default="" if not required else serializers.empty,
        max_length=64,
        help_text=help_text,
    )


class CompareQueryIn(serializers.Serializer):
    a = _point(
        "A message of the session (any branch); default, with `other`: the head.",
        required=False,
    )
    b = _point(
        "Another message of the session (any branch), or of `other`; default: its head.",
        required=False,
    )
    other = _point(
        "Another session of yours that shares this one's history (a fork of it, its source,"
        " another fork or alternative of the same session): `b` is then a point of it.",
        required=False,
    )
    file = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text="One file's unified diff from a to b instead of the comparison.",
    )

    def validate_file(self, value: str) -> str:
        if not value or len(value) > 4096 or "\0" in value:
            raise refuse("file must be a path in the worktree.")
        return value


class CompareSideOut(Out):
    message_id = serializers.CharField(allow_null=True, help_text="The point (null: the start).")
    messages = MessageOut(many=True, help_text="The messages after the common ancestor.")
    truncated = serializers.BooleanField(
        help_text="More messages follow (API_PAGE_MAX a side, or API_PAGE_MAX_BYTES)."
    )
    session_id = serializers.CharField(
        required=False, help_text="With `other`, on side b only: the other session."
    )
    base = serializers.CharField(
        required=False,
        allow_null=True,
        help_text="With `other`, on side b only: the other session's copy of the common ancestor.",
    )


class CompareFileOut(Out):
    path = serializers.CharField()
    status = Enum("DiffStatus", ["added", "deleted", "modified"])
    additions = serializers.IntegerField()
    deletions = serializers.IntegerField()
    binary = serializers.BooleanField()


class CompareOut(Out):
    base = serializers.CharField(allow_null=True, help_text="The common ancestor (null: none).")
    a = CompareSideOut()
    b = CompareSideOut()
    files = CompareFileOut(many=True, help_text="Files that differ from a to b.")
    files_truncated = serializers.BooleanField(help_text="More than API_FILES_MAX differ.")


COMPARE_OUT = PolymorphicProxySerializer(
    component_name="CompareAnswer",
    serializers=[CompareOut, FileDiffOut],
    resource_type_field_name=None,
    many=False,
)


class CompareViewSet(SessionScopedViewSet):
    # ``GET /api/sessions/{id}/compare/``

    @extend_schema(parameters=[CompareQueryIn], responses={200: COMPARE_OUT})
    def compare(self, request: Request, session_id: str) -> Response:
        """Two points of the session from their common ancestor: both conversations and the
        files that differ; with ``file``, that file's unified diff from ``a`` to ``b``."""
        session = self.get_object()
        query = self.query(CompareQueryIn)
        points = {"a": query["a"] or None, "b": query["b"] or None}
        if query["other"]:
            points["other"] = session_for_user(request.user, query["other"])
        if "file" in query:
            return Response(
                compare_services.compare_file(session=session, file=query["file"], **points)
            )
        return Response(compare_services.compare_points(session=session, **points))
