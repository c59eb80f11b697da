"""``POST /api/sessions/{id}/apply/`` (docs/semantics.md §14.2): a
tool step's or a turn's change, from any branch or from another session of the caller's,
merged three-way onto the head. The logic is ``services.apply``."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.serializers import Choice, In

from ..services import apply as apply_services
from .base import SessionScopedViewSet


class ApplyIn(In):
    part_id = serializers.CharField(
        required=False, allow_blank=True, max_length=40, default="",
        help_text="A tool call: the change its step made.",
    )  # fmt: skip
    message_id = serializers.CharField(
        required=False, allow_blank=True, max_length=40, default="",
        help_text="A message: the change its whole turn made.",
    )  # fmt: skip
    on_conflict = Choice(
        apply_services.ON_CONFLICT,
        required=False,
        default="refuse",
        message="on_conflict must be one of refuse, markers.",
        help_text="refuse (409, nothing written) or markers (written with conflict markers).",
    )


class AppliedOut(serializers.Serializer):
    applied = serializers.ListField(child=serializers.CharField())
    conflicts = serializers.ListField(child=serializers.CharField())
    message_id = serializers.CharField(help_text="The history event's message (revert undoes it).")


class ApplyViewSet(SessionScopedViewSet):
    @extend_schema(request=ApplyIn, responses={200: AppliedOut})
    def apply(self, request: Request, session_id: str) -> Response:
        """Apply a change onto the head's files, three-way; 409 ``ConflictError`` naming the
        files when it conflicts and ``on_conflict`` is ``refuse``."""
        session = self.get_object()
        args = self.body(ApplyIn)
        result = apply_services.apply_change(
            session=session,
            user=request.user,
            part_id=args["part_id"] or None,
            message_id=args["message_id"] or None,
            on_conflict=args["on_conflict"],
        )
        return Response(result)
