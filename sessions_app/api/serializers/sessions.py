"""The session itself: creating, listing and changing one, the moves of its history (head,
revert, rollback, fork) and its answer's shape, its lineage and the models it may use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from api.serializers import (
    Choice,
    Enum,
    In,
    Out,
    PageLinks,
    StrictString,
    StrictWholeNumber,
    refuse,
    refuse_body,
)
from core import models_catalog

from ...models import Session
from .fields import PageLimit, Permissions
from .files import DiffEntryOut, NotKeptOut
from .repositories import RepositoryIn

CHECKPOINTS = Session.Checkpoint.values


CHECKPOINT_MESSAGE = f"checkpoint must be one of {', '.join(CHECKPOINTS)}."


# -- input ------------------------------------------------------------------------------------
class SessionIn(In):
    repository = RepositoryIn(
        required=False,
        allow_null=True,
        default=None,
        help_text="Start from a clone of this repository (the session is 'preparing' first).",
    )
    title = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")
    model = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=200,
        default="",
        help_text="'scripted', 'openai:<model>' or 'anthropic:<model>'; empty: AGENT_MODEL.",
    )
    system_prompt = serializers.CharField(
        required=False, allow_blank=True, max_length=100_000, default=""
    )
    checkpoint = Choice(
        CHECKPOINTS,
        required=False,
        allow_blank=True,
        default="",
        message=CHECKPOINT_MESSAGE,
        help_text="When a run persists its progress; empty: tool-batch.",
    )
    permissions = Permissions(
        required=False,
        default=dict,
        help_text='Tool rules: {"<tool>": "allow"|"ask"|"deny" | {"<pattern>": rule}}.',
    )

    def validate_model(self, value: str) -> str:
        return check_model(value) if value else value


def check_model(value: str) -> str:
    problem = models_catalog.check(value)
    if problem:
        raise refuse(problem)
    return value


PATCHABLE = {"title", "model", "permissions"}


class SessionPatchIn(In):
    title = StrictString(
        required=False, max_length=200, message="title must be a non-empty string."
    )
    model = StrictString(
        required=False,
        max_length=200,
        message="model must be a non-empty string.",
        help_text="The model of the session's next runs.",
    )
    permissions = Permissions(required=False, help_text="Replaces the session's own rules.")

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, Mapping) or set(data) - PATCHABLE or not data:
            raise refuse_body("Only the title, model and permissions of a session can be changed.")
        return super().to_internal_value(data)

    def validate_model(self, value: str) -> str:
        if len(value) > 200:  # the column's length: a longer one was a 500 on save
            raise refuse("model must be at most 200 characters.")
        return check_model(value)

    def validate_title(self, value: str) -> str:
        if len(value) > 200:
            raise refuse("title must be at most 200 characters.")
        return value


class SessionsQueryIn(serializers.Serializer):
    limit = PageLimit()
    # Read by the paginator (a bad one is its 404); declared for the schema.
    cursor = serializers.CharField(
        required=False, allow_blank=True, help_text="From a page's next/previous link."
    )
    q = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        default="",
        help_text="Only titles containing this.",
    )

    def validate_q(self, value: str) -> str:
        return value[:200]


class HeadIn(In):
    message_id = serializers.CharField(max_length=40)


class RevertIn(In):
    message_id = serializers.CharField(max_length=40)
    part_id = serializers.CharField(max_length=40, required=False, allow_null=True, default=None)
    mode = Choice(
        ("both", "conversation", "files"),
        required=False,
        default="both",
        message="mode must be 'both', 'conversation' or 'files'.",
        enum="RevertMode",
        help_text="both: conversation and files; conversation: the files stay; files: the "
        "conversation stays (docs/semantics.md §14.5).",
    )


class RollbackIn(In):
    num_turns = StrictWholeNumber(
        min_value=1, message="num_turns must be an integer of at least 1."
    )


class ForkIn(In):
    message_id = serializers.CharField(max_length=40, required=False, allow_null=True, default=None)
    title = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")


# -- output -----------------------------------------------------------------------------------
class SourceOut(Out):
    type = serializers.ChoiceField(
        ("empty", "git", "upload", "share", "admin"),
        help_text='"share" / "admin": a copy of another user\'s session (a share link\'s fork,'
        " the admin's fork), whose origin stays with its owner: no URL, and no push.",
    )
    url = serializers.CharField(required=False)
    ref = serializers.CharField(required=False)
    branch = serializers.CharField(required=False, help_text="The branch checked out.")
    depth = serializers.IntegerField(required=False)
    commit = serializers.CharField(required=False, allow_null=True)
    error = serializers.CharField(required=False)
    name = serializers.CharField(required=False)
    files = serializers.IntegerField(required=False)


class RevertOut(Out):
    message_id = serializers.CharField()
    part_id = serializers.CharField(allow_null=True)
    mode = serializers.CharField(
        required=False, help_text="both or conversation (a conversation revert moved no files)."
    )
    snapshot = serializers.CharField(help_text="The files before the revert (a git tree).")
    diff = serializers.CharField(help_text="Unified diff of what the revert undid.")
    files = serializers.ListField(child=serializers.CharField())
    changes = DiffEntryOut(many=True, required=False)
    not_kept = NotKeptOut(required=False)


class SummaryOut(Out):
    additions = serializers.IntegerField()
    deletions = serializers.IntegerField()
    files = serializers.IntegerField()


class SessionOut(Out):
    id = serializers.CharField()
    title = serializers.CharField()
    owner = serializers.IntegerField(help_text="The owner's user id.")
    status = Enum("SessionStatus", Session.Status.values)
    busy_run_id = serializers.CharField(allow_null=True)
    head_message_id = serializers.CharField(allow_null=True)
    revert = RevertOut(allow_null=True)
    summary = SummaryOut()
    forked_from_session_id = serializers.CharField(allow_null=True)
    forked_from_message_id = serializers.CharField(allow_null=True)
    lineage_kind = serializers.CharField(
        allow_null=True,
        help_text='"alternative" for one of N alternatives, "share" for a fork of a share'
        ' link, "admin" for the admin\'s fork action; null otherwise.',
    )
    alternative_group = serializers.CharField(allow_null=True)
    model = serializers.CharField()
    system_prompt = serializers.CharField()
    checkpoint = serializers.ChoiceField(CHECKPOINTS)
    context_tokens = serializers.IntegerField()
    usage = serializers.DictField(
        help_text="Tokens (input, output, cached input), calls and cost_usd of its runs."
    )
    permissions = serializers.DictField(help_text="The tool rules in force (defaults + own).")
    source = SourceOut(help_text="Where the worktree's first files came from.")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


@extend_schema_serializer(many=False)  # a page, though its operation lists
class SessionPageOut(PageLinks):
    results = SessionOut(many=True)


class SessionBriefOut(Out):
    id = serializers.CharField()
    title = serializers.CharField()
    forked_from_session_id = serializers.CharField(allow_null=True)
    forked_from_message_id = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    lineage_kind = serializers.CharField(
        allow_null=True,
        help_text='"fork", "share" (forked from a share link), "admin" (the admin\'s fork'
        ' action), "alternative", or null for a session not forked.',
    )
    alternative_group = serializers.CharField(allow_null=True)


class ForkOriginOut(Out):
    kind = serializers.CharField(help_text='"fork", "share" or "admin".')
    session_id = serializers.CharField(allow_null=True)
    title = serializers.CharField(allow_null=True, help_text="The source's title when forked.")
    owner = serializers.CharField(allow_null=True, help_text="The source's owner (username).")


class LineageOut(Out):
    session = SessionBriefOut()
    ancestors = SessionBriefOut(many=True, help_text="Root first.")
    forks = SessionBriefOut(many=True, help_text="The caller's own only.")
    origin = ForkOriginOut(
        allow_null=True,
        help_text="A fork whose source the caller may not open (a share, the admin's fork):"
        " where it came from. Null when the source is in ``ancestors`` or for no fork.",
    )


class ModelOut(Out):
    name = serializers.CharField(help_text="What a session's model holds.")
    context_window = serializers.IntegerField(help_text="Tokens.")
    price = serializers.DictField(
        child=serializers.FloatField(),
        help_text="USD per million tokens: input, output, cached_input.",
    )


class ModelsOut(Out):
    default = serializers.CharField(help_text="AGENT_MODEL: a new session's model.")
    results = ModelOut(many=True)
