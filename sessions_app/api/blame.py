"""``GET /api/sessions/{id}/blame/<path>``: each run of a file's lines with the tool call that
last changed it (docs/semantics.md §14.4). A thin view: ``services.blame`` holds the logic."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from ..services import blame
from .base import SessionScopedViewSet


class BlameQueryIn(serializers.Serializer):
    message_id = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=64,
        help_text="The point (a message of any branch); default: the head.",
    )


class BlameLineOut(serializers.Serializer):
    start = serializers.IntegerField(help_text="The run's first line (from 1).")
    end = serializers.IntegerField(help_text="Its last line (included).")
    message_id = serializers.CharField(
        allow_null=True, help_text="The step's message; null: before the session's first snapshot."
    )
    part_id = serializers.CharField(allow_null=True, help_text="The tool call (its part).")
    run_id = serializers.CharField(allow_null=True)
    tool = serializers.CharField(allow_null=True, help_text="The tool's name.")
    step = serializers.IntegerField(allow_null=True, help_text="The step's index in its run.")
    position = serializers.IntegerField(
        allow_null=True, help_text="The message's place in the conversation (from 1)."
    )
    turn = serializers.IntegerField(
        allow_null=True,
        help_text="The turn the message belongs to, as the chat counts them: the user messages"
        " on the path up to it (from 1).",
    )
    created_at = serializers.DateTimeField(allow_null=True, help_text="When the step started.")


class BlameViewSet(SessionScopedViewSet):
    @extend_schema(parameters=[BlameQueryIn], responses={200: BlameLineOut(many=True)})
    def blame(self, request: Request, session_id: str, path: str) -> Response:
        """For each run of the file's lines at the point, the tool call whose step last
        changed it (null ids: lines from before the session's first snapshot, such as a
        clone's or an upload's)."""
        session = self.get_object()
        query = self.query(BlameQueryIn)
        return Response(
            blame.blame_file(session=session, path=path, message_id=query["message_id"] or None)
        )
