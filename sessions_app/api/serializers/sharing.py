"""A share link and what it shows: the pinned path's messages and files, read by anyone with
the link, and forked from it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from api.serializers import In, Out, StrictString

from .fields import PageLimit
from .files import DiffEntryOut, WorktreeEntryOut
from .messages import MessageOut


# -- input ------------------------------------------------------------------------------------
class ShareIn(In):
    include_system_prompt = serializers.BooleanField(required=False, default=False)


class SharedForkIn(In):
    title = StrictString(
        required=False,
        allow_blank=True,
        default="",
        message="title must be a string.",
        help_text="Cut at 200 characters.",
    )

    def run_validation(self, data: Any = serializers.empty) -> Any:
        # The page's fork button posts no JSON: a body that is not an object names no title.
        return super().run_validation(data if isinstance(data, Mapping) else {})

    def validate_title(self, value: str) -> str:
        return value[:200]


class SharedQueryIn(serializers.Serializer):
    limit = PageLimit()
    before = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="The page of older messages before this id.",
    )


# -- output -----------------------------------------------------------------------------------
class ShareLinkOut(Out):
    token = serializers.CharField()
    url = serializers.CharField(help_text="The page of the link.")
    message_id = serializers.CharField(allow_null=True, help_text="The pinned message.")
    snapshot = serializers.CharField(help_text="The pinned files (a git tree).")
    include_system_prompt = serializers.BooleanField()
    pinned_at = serializers.DateTimeField()


class SharedSessionOut(Out):
    id = serializers.CharField()
    title = serializers.CharField()
    owner = serializers.CharField(help_text="The owner's username.")
    model = serializers.CharField()
    system_prompt = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()


class SharedOut(ShareLinkOut):
    session = SharedSessionOut()
    messages = MessageOut(many=True, help_text="A page of the pinned path, root → pin.")
    previous = serializers.URLField(allow_null=True)
    files = WorktreeEntryOut(many=True)
    diff = DiffEntryOut(many=True)
