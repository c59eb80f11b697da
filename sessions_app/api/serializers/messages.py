"""The conversation's shapes: messages and their parts (one shape per part type, told apart
by ``type``), a page of them, and the message tree of every branch."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers

from api.serializers import Enum, Flag, Out, PageLinks

from ...models import Message, Part
from .fields import PageLimit


# -- input ------------------------------------------------------------------------------------
class MessagesQueryIn(serializers.Serializer):
    limit = PageLimit()
    before = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="The page of older messages before this id.",
    )
    after = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="The page of newer messages after this id.",
    )
    tree = Flag(help_text="Every branch, in id order.")


# -- output -----------------------------------------------------------------------------------
class ToolTimeOut(Out):
    start = serializers.FloatField(allow_null=True)
    end = serializers.FloatField(allow_null=True)


class ToolStateOut(Out):
    status = Enum("ToolStatus", ["pending", "running", "completed", "error"])
    input = serializers.DictField(help_text="The call's arguments.")
    output = serializers.JSONField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    metadata = serializers.DictField()
    time = ToolTimeOut(required=False)


class PartBase(Out):
    id = serializers.CharField()
    message_id = serializers.CharField()
    session_id = serializers.CharField()
    order = serializers.IntegerField()
    type = Enum("PartType", Part.Type.values)
    truncated = serializers.BooleanField(
        required=False,
        help_text="Set when a field was cut at API_PART_FIELD_MAX; GET /api/parts/{id}/ "
        "gives the part whole.",
    )


class TextPartOut(PartBase):
    """``text`` and ``reasoning``."""

    text = serializers.CharField()


class ToolPartOut(PartBase):
    call_id = serializers.CharField()
    tool = serializers.CharField()
    state = ToolStateOut()
    input_text = serializers.CharField(
        required=False, help_text="In a shared view: the input, as indented JSON."
    )


class StepPartOut(PartBase):
    """``step-start`` and ``step-finish``: the files at that point of the step."""

    snapshot = serializers.CharField(help_text="A git tree of the worktree.")
    step = serializers.IntegerField()
    skipped = serializers.ListField(child=serializers.CharField(), required=False)
    interrupted = serializers.BooleanField(required=False)


class PatchPartOut(PartBase):
    """The files a step changed, and the tree before it."""

    snapshot = serializers.CharField()
    files = serializers.ListField(child=serializers.CharField())
    file_count = serializers.IntegerField(
        required=False, help_text="With truncated: how many files the whole list names."
    )


class FilePartOut(PartBase):
    pass


class CompactionPartOut(PartBase):
    """A summary the model sees in place of the path's first ``replaced`` messages."""

    text = serializers.CharField(help_text="The summary.")
    replaced = serializers.IntegerField(help_text="How many of the path's first messages.")
    tokens_before = serializers.IntegerField()
    tokens_after = serializers.IntegerField()


class AppliedPartOut(PartBase):
    """A change applied onto the head from another step, turn or fork (docs/semantics.md §14.2)."""

    source_session_id = serializers.CharField()
    source_message_id = serializers.CharField()
    source_part_id = serializers.CharField(allow_null=True)
    files = serializers.ListField(child=serializers.CharField())
    conflicts = serializers.ListField(child=serializers.CharField())


PART_SHAPES: dict[Part.Type, type[PartBase]] = {
    Part.Type.TEXT: TextPartOut,
    Part.Type.REASONING: TextPartOut,
    Part.Type.TOOL: ToolPartOut,
    Part.Type.STEP_START: StepPartOut,
    Part.Type.STEP_FINISH: StepPartOut,
    Part.Type.PATCH: PatchPartOut,
    Part.Type.FILE: FilePartOut,
    Part.Type.COMPACTION: CompactionPartOut,
    Part.Type.APPLIED: AppliedPartOut,
}


def part_out(**kwargs: Any) -> PolymorphicProxySerializer:
    """A part, by its ``type``."""
    return PolymorphicProxySerializer(
        component_name="Part",
        serializers={kind.value: shape for kind, shape in PART_SHAPES.items()},
        resource_type_field_name="type",
        **kwargs,
    )


class MessageErrorOut(Out):
    reason = serializers.CharField()
    message = serializers.CharField()
    metadata = serializers.DictField(required=False)


class MessageOut(Out):
    id = serializers.CharField()
    session_id = serializers.CharField()
    run_id = serializers.CharField(allow_null=True)
    parent_id = serializers.CharField(allow_null=True)
    role = Enum("MessageRole", Message.Role.values)
    created_at = serializers.DateTimeField()
    completed_at = serializers.DateTimeField(allow_null=True, help_text="null while unfinished.")
    error = MessageErrorOut(allow_null=True)
    model = serializers.CharField()
    tokens = serializers.DictField()
    hidden = serializers.BooleanField()
    parts = part_out(many=True)


class MessagePageOut(PageLinks):
    results = MessageOut(many=True)


class TreeEntryOut(Out):
    id = serializers.CharField()
    parent_id = serializers.CharField(allow_null=True)
    role = Enum("MessageRole", Message.Role.values)
    run_id = serializers.CharField(allow_null=True)
    hidden = serializers.BooleanField()
