"""``POST /api/sessions/{id}/apply/`` (docs/semantics.md §14.2): a tool call's change (its
own file's, or its step's), or a turn's, from any branch or from another session of the
caller's, merged three-way onto the head. The logic is ``services.apply``."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.serializers import Choice, In

from .. import host_calls
from ..services import apply as apply_services
from .base import SessionScopedViewSet


class ApplyIn(In):
    part_id = serializers.CharField(
        required=False, allow_blank=True, max_length=40, default="",
        help_text="A tool call: the change it made (a write, append or delete: its step's "
        "change to its own file; a shell call: its whole step's).",
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
    scope = Choice(
        apply_services.SCOPES,
        required=False,
        default="call",
        message="scope must be one of call, step.",
        help_text="With part_id: call (default; the call's own files) or step (the whole "
        "step's change, every call of it).",
    )


class AppliedOut(serializers.Serializer):
    applied = serializers.ListField(child=serializers.CharField())
    conflicts = serializers.ListField(child=serializers.CharField())
    message_id = serializers.CharField(help_text="The history event's message (revert undoes it).")
    scope = serializers.ChoiceField(
        choices=["call", "step", "turn"],
        help_text="What was taken: the call's own files, its whole step (a shell call, or "
        'scope "step"), or the turn (message_id).',
    )
    paths = serializers.ListField(
        child=serializers.CharField(),
        help_text='With scope "call": the files the call named (the only ones taken); else [].',
    )


class ApplyViewSet(SessionScopedViewSet):
    @extend_schema(request=ApplyIn, responses={200: AppliedOut})
    def apply(self, request: Request, session_id: str) -> Response:
        """Apply a change onto the head's files, three-way; 409 ``ConflictError`` naming the
        files when it conflicts and ``on_conflict`` is ``refuse``."""
        session = self.get_object()
        args = self.body(ApplyIn)
        result = host_calls.call_json(
            "apply",
            session=session,
            user=request.user,
            part_id=args["part_id"] or None,
            message_id=args["message_id"] or None,
            on_conflict=args["on_conflict"],
            scope=args["scope"],
        )
        return Response(result)
