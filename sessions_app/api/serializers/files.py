"""The worktree's files and the session's changes: the listing, a file, the diff (whole or one
file's), the archive and the patch of a span of the session."""

from __future__ import annotations

from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers

from api.serializers import Choice, Enum, Out, refuse


# -- input ------------------------------------------------------------------------------------
def _point(help_text: str) -> serializers.CharField:
    """A message id naming a point of the session (blank: the default point)."""
    return serializers.CharField(
        required=False, allow_blank=True, default="", max_length=64, help_text=help_text
    )


class ArchiveQueryIn(serializers.Serializer):
    message_id = _point("The point (any branch); default: the head.")
    format = Choice(
        ["zip", "tar.gz"],
        required=False,
        default="zip",
        message="format must be 'zip' or 'tar.gz'.",
        enum="ArchiveFormat",
    )


class PatchQueryIn(serializers.Serializer):
    to = _point("The last point (any branch); default: the head.")
    format = Choice(
        ["diff", "mbox"],
        required=False,
        default="diff",
        message="format must be 'diff' or 'mbox'.",
        enum="PatchFormat",
        help_text="diff: a unified diff (git apply); mbox: one commit per user turn (git am).",
    )


# ``from`` is a keyword: declared by name.
PatchQueryIn._declared_fields["from"] = _point(  # noqa: SLF001
    "The first point, before ``to`` on its branch; default: the session's start."
)


class FileQueryIn(serializers.Serializer):
    download = serializers.BooleanField(
        required=False, default=False, help_text="The file as an attachment (a download)."
    )
    not_kept = serializers.BooleanField(
        required=False,
        default=False,
        help_text="The listing: the files the snapshots do not keep, {count, files}.",
    )


class DiffQueryIn(serializers.Serializer):
    message_id = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="One turn's diff."
    )
    file = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text="One file's unified diff instead of the list.",
    )

    def validate_file(self, value: str) -> str:
        if not value or len(value) > 4096 or "\0" in value:
            raise refuse("file must be a path in the worktree.")
        return value


# -- output -----------------------------------------------------------------------------------
class WorktreeEntryOut(Out):
    path = serializers.CharField()
    size = serializers.IntegerField()


class DiffEntryOut(Out):
    file = serializers.CharField()
    status = Enum("DiffStatus", ["added", "deleted", "modified"])
    additions = serializers.IntegerField()
    deletions = serializers.IntegerField()
    binary = serializers.BooleanField()


class FileDiffOut(Out):
    file = serializers.CharField()
    patch = serializers.CharField(help_text="Unified diff.")


class NotKeptOut(Out):
    count = serializers.IntegerField(help_text="Files the snapshots do not keep.")
    files = serializers.ListField(
        child=serializers.DictField(), help_text="The first of them: {path, reason}."
    )


DIFF_OUT = PolymorphicProxySerializer(
    component_name="Diff",
    serializers=[DiffEntryOut(many=True), FileDiffOut],
    resource_type_field_name=None,
    many=False,
)
