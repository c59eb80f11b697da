"""The session API's door: input serializers (bodies and query strings, validated once, here)
and output serializers (the contract's JSON shapes, declared for the OpenAPI schema).

The JSON itself is produced by ``sessions_app.selectors`` (``session_data``, ``message_data``,
``part_data``…), which the events share; the output serializers here name the same fields, and
``tests/test_schema.py`` checks that the two agree."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from django.conf import settings
from drf_spectacular.drainage import set_override
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    PolymorphicProxySerializer,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import serializers
from rest_framework.settings import api_settings

from core import models_catalog
from core.errors import InvalidInput

from .. import permissions
from ..models import Message, Part, Session
from ..selectors import page_limit
from .errors import SENTENCE

CHECKPOINTS = Session.Checkpoint.values
CHECKPOINT_MESSAGE = f"checkpoint must be one of {', '.join(CHECKPOINTS)}."


def refuse(message: str) -> serializers.ValidationError:
    """A refusal in the contract's words: the message is shown as it is (``SENTENCE``)."""
    return serializers.ValidationError(message, code=SENTENCE)


def refuse_body(message: str) -> serializers.ValidationError:
    """``refuse`` for a whole body, from a serializer's ``to_internal_value`` (whose errors
    DRF expects keyed by field)."""
    return serializers.ValidationError({api_settings.NON_FIELD_ERRORS_KEY: [message]}, SENTENCE)


# -- fields -----------------------------------------------------------------------------------
class OneSentence:
    """A field every refusal of which (wrong type, null, not a choice…) is one sentence."""

    def __init__(self, *args: Any, message: str, **kwargs: Any) -> None:
        self.message = message
        super().__init__(*args, **kwargs)

    def fail(self, key: str, **kwargs: Any) -> NoReturn:
        raise refuse(self.message)


def _name_enum(field: serializers.ChoiceField, name: str) -> None:
    # The schema names an enum after its field; fields named alike with other choices
    # (``status`` of a session, a run, a tool call) would get hashed names.
    set_override(field, "field", {"type": "string", "enum": list(field.choices)})
    set_override(field, "field_component_name", name)


class Enum(serializers.ChoiceField):
    """A ChoiceField whose enum is ``name`` in the schema."""

    def __init__(self, name: str, choices: Sequence[str], **kwargs: Any) -> None:
        super().__init__(choices, **kwargs)
        _name_enum(self, name)


class Choice(OneSentence, serializers.ChoiceField):
    def __init__(self, *args: Any, enum: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if enum:
            _name_enum(self, enum)


class Permissions(serializers.JSONField):
    """Tool rules, ``{"<tool>": "allow"|"ask"|"deny" | {"<pattern>": rule}}``, checked by
    ``sessions_app.permissions.validate`` (its sentence is the refusal)."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        try:
            return permissions.validate(data)
        except ValueError as exc:
            raise refuse(str(exc)) from exc


class StrictBoolean(OneSentence, serializers.BooleanField):
    """JSON ``true`` or ``false`` only: DRF's BooleanField also takes "yes", 1 or "on"."""

    def to_internal_value(self, data: Any) -> bool:
        if isinstance(data, bool):
            return data
        self.fail("invalid")


class StrictString(OneSentence, serializers.CharField):
    """A JSON string only (DRF's CharField turns a number into one), not blank unless
    ``allow_blank``; neither trimmed nor checked by validators: a ``max_length`` is for the
    schema, and the serializer checks it in its own words (``SessionPatchIn``)."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        if not data.strip() and not self.allow_blank:
            self.fail("blank")
        return data

    def run_validation(self, data: Any = serializers.empty) -> Any:
        # CharField trims and checks blank and length (with its own messages) before
        # to_internal_value; here the whole check is ours.
        (is_empty, value) = self.validate_empty_values(data)
        if is_empty:
            return value
        return self.to_internal_value(data)


class StrictWholeNumber(OneSentence, serializers.IntegerField):
    """A JSON integer (not a boolean, a float or a numeric string) of at least ``min_value``."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        if self.min_value is not None and data < self.min_value:
            self.fail("min_value")
        return data


@extend_schema_field(
    {
        "type": "integer",
        "minimum": 1,
        "description": "Items a page (default 50, at most 200).",
    }
)
class PageLimit(serializers.Field):
    """``?limit=``: a whole number from 1 to ``API_PAGE_MAX``; absent or empty: the default."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, default=_default_limit, **kwargs)

    def to_internal_value(self, data: Any) -> int:
        try:
            return page_limit(data)
        except InvalidInput as exc:
            raise refuse(exc.message) from exc

    def to_representation(self, value: int) -> int:
        return value


def _default_limit() -> int:
    return settings.API_PAGE_DEFAULT


@extend_schema_field(OpenApiTypes.BOOL)
class Flag(serializers.Field):
    """A query flag: one of the ``on`` values turns it on; anything else leaves it off."""

    def __init__(self, *, on: tuple[str, ...] = ("1", "true", "yes"), **kwargs: Any) -> None:
        self.on = on
        super().__init__(required=False, default=False, **kwargs)

    def to_internal_value(self, data: Any) -> bool:
        return data in self.on

    def to_representation(self, value: bool) -> bool:
        return value


# -- input ------------------------------------------------------------------------------------
class In(serializers.Serializer):
    # A request's body: a JSON object.
    default_error_messages = {"invalid": "The body must be a JSON object."}

    def run_validation(self, data: Any = serializers.empty) -> Any:
        if data is None:  # a JSON ``null`` body (DRF would answer "No data provided")
            raise refuse_body(self.error_messages["invalid"])
        return super().run_validation(data)


class TokenIn(In):
    username = serializers.CharField()
    password = serializers.CharField(trim_whitespace=False)


class RepositoryIn(In):
    url = serializers.CharField(
        max_length=2000, help_text="https://, ssh:// (or user@host:path) or git:// URL."
    )
    ref = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=200,
        default="",
        help_text="A branch, a tag or a commit id; empty: the remote's default branch.",
    )
    depth = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=1_000_000,
        default=1,
        help_text="Commits of history to fetch; 0: all of it.",
    )
    credential_id = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=40, default=None
    )


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
        "conversation stays (SEMANTICS 14.5).",
    )


class RollbackIn(In):
    num_turns = StrictWholeNumber(
        min_value=1, message="num_turns must be an integer of at least 1."
    )


class ForkIn(In):
    message_id = serializers.CharField(max_length=40, required=False, allow_null=True, default=None)
    title = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")


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


class ShareIn(In):
    include_system_prompt = serializers.BooleanField(required=False, default=False)


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


class SharedQueryIn(serializers.Serializer):
    limit = PageLimit()
    before = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="The page of older messages before this id.",
    )


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


# -- output: the contract's shapes ------------------------------------------------------------
class Out(serializers.Serializer):
    # An answer's shape, declared for the schema: its component is named without the "Out".
    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        set_override(cls, "component_name", cls.__name__.removesuffix("Out"))


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


class SourceOut(Out):
    type = serializers.ChoiceField(("empty", "git", "upload"))
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


class PageLinks(Out):
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)


@extend_schema_serializer(many=False)  # a page, though its operation lists
class SessionPageOut(PageLinks):
    results = SessionOut(many=True)


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


class FilePartOut(PartBase):
    pass


class CompactionPartOut(PartBase):
    """A summary the model sees in place of the path's first ``replaced`` messages."""

    text = serializers.CharField(help_text="The summary.")
    replaced = serializers.IntegerField(help_text="How many of the path's first messages.")
    tokens_before = serializers.IntegerField()
    tokens_after = serializers.IntegerField()


class AppliedPartOut(PartBase):
    """A change applied onto the head from another step, turn or fork (SEMANTICS 14.2)."""

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


DIFF_OUT = PolymorphicProxySerializer(
    component_name="Diff",
    serializers=[DiffEntryOut(many=True), FileDiffOut],
    resource_type_field_name=None,
    many=False,
)


class TreeEntryOut(Out):
    id = serializers.CharField()
    parent_id = serializers.CharField(allow_null=True)
    role = Enum("MessageRole", Message.Role.values)
    run_id = serializers.CharField(allow_null=True)
    hidden = serializers.BooleanField()


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


class TokenOut(Out):
    token = serializers.CharField()


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


class UploadIn(In):
    title = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")


class PushIn(In):
    branch = serializers.CharField(max_length=200, help_text="The remote branch to push to.")
    credential_id = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=40, default=None
    )


class PushOut(serializers.Serializer):
    remote = serializers.CharField()
    branch = serializers.CharField()
    commit = serializers.CharField()


class CredentialIn(In):
    name = serializers.CharField(max_length=100)
    host = serializers.RegexField(
        r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,253}[A-Za-z0-9])?$",
        max_length=255,
        help_text="The host it is sent to (and only there), e.g. github.com.",
    )
    kind = Choice(("token", "ssh_key"), message="kind must be one of token, ssh_key.")
    secret = serializers.CharField(
        max_length=16384, trim_whitespace=False, write_only=True, help_text="Never shown back."
    )


class CredentialOut(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    host = serializers.CharField()
    kind = serializers.CharField()
    created_at = serializers.DateTimeField()
