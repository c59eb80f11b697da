"""The run API's door: run, continue and regenerate requests validated once, here, in the
contract's words (``messages is required in prompt mode.``); the run's JSON shapes declared
for the OpenAPI schema (``runs_app.selectors.run_data`` produces them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import empty

from api.serializers import (
    Choice,
    Enum,
    Flag,
    In,
    OneSentence,
    Out,
    StrictBoolean,
    StrictString,
    refuse,
)
from sessions_app.api.serializers.messages import MessageErrorOut, ToolStateOut
from sessions_app.api.serializers.sessions import (
    CHECKPOINT_MESSAGE,
    CHECKPOINTS,
    RevertOut,
    SessionOut,
)
from sessions_app.models import Message, Part

from .. import output_schema
from ..lifecycle import STRATEGIES
from ..models import Run

MODES = [Run.Mode.PROMPT, Run.Mode.RESUME]
STRATEGY_MESSAGE = f"multitask_strategy must be one of {', '.join(STRATEGIES)}."
CONTINUE_FROM_MESSAGE = "continue_from must be 'end', 'last_user' or a message index K ≥ 0."


# -- fields -----------------------------------------------------------------------------------
class UserMessageIn(serializers.Serializer):
    """``{"role": "user", "content": "…"}``: a user turn."""

    not_an_object = "each message must be an object with role 'user'."
    role = Choice(["user"], default="user", message=not_an_object, enum="UserRole")
    content = StrictString(message="each message needs a non-empty string content.")

    def to_internal_value(self, data: Any) -> dict[str, str]:
        if not isinstance(data, Mapping):
            self.fail("invalid")
        return {"role": "user", "content": super().to_internal_value(data)["content"]}

    def fail(self, key: str, **kwargs: Any) -> NoReturn:
        # Not an object, or null: one sentence, as for a wrong role.
        raise refuse(self.not_an_object)


class InputMessageIn(UserMessageIn):
    """A user turn given to ``continue`` (the same shape, its errors name ``input``)."""

    not_an_object = "each entry of input must be an object with role 'user'."
    role = Choice(["user"], default="user", message=not_an_object, enum="UserRole")
    content = StrictString(message="each entry of input needs a non-empty string content.")


class UserMessages(OneSentence, serializers.ListField):
    """``messages``: absent, null or empty (any false value) is none; otherwise a non-empty
    list of user turns. Whether none is allowed depends on ``mode`` (``RunIn.validate``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            child=UserMessageIn(),
            required=False,
            allow_null=True,
            default=list,
            message="messages must be a list of {role, content} objects.",
            **kwargs,
        )

    def run_validation(self, data: Any = empty) -> list[dict[str, str]]:
        if data is empty or not data:
            return []
        return super().run_validation(data)


class ContinueInput(OneSentence, serializers.ListField):
    """``input`` of a continue: absent, null or "" is none, a string is one user turn,
    otherwise a non-empty list of user turns."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            child=InputMessageIn(),
            required=False,
            allow_null=True,
            allow_empty=False,
            default=list,
            message="input must be a list of {role, content} objects.",
            help_text="A list of user turns, or a string: one user turn.",
            **kwargs,
        )

    def run_validation(self, data: Any = empty) -> list[dict[str, str]]:
        if data is empty or data is None or data == "":
            return []
        if isinstance(data, str):
            data = [{"role": "user", "content": data}]
        return super().run_validation(data)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "enum": ["end", "last_user"]},
            {"type": "integer", "minimum": 0},
        ],
        "description": "Where the run goes on from: its end, its last user message, or K "
        "entries of its transcript (GET /api/runs/{id}/messages/), snapped to a tool-safe "
        "point.",
    }
)
class ContinueFrom(OneSentence, serializers.Field):
    def to_internal_value(self, data: Any) -> str | int:
        if isinstance(data, str) and data in ("end", "last_user"):
            return data
        if isinstance(data, int) and not isinstance(data, bool) and data >= 0:
            return data
        self.fail("invalid")

    def to_representation(self, value: str | int) -> str | int:
        return value


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {},
        "nullable": True,
        "description": "A JSON Schema: the run answers structured output in its `output`.",
    }
)
class JsonSchemaObject(OneSentence, serializers.JSONField):
    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            self.fail("invalid")
        return data


def strategy() -> Choice:
    return Choice(
        STRATEGIES,
        required=False,
        default="reject",
        message=STRATEGY_MESSAGE,
        help_text="For a busy session: reject (409), enqueue, interrupt or rollback.",
    )


def wait() -> serializers.BooleanField:
    return serializers.BooleanField(
        required=False, default=False, help_text="Answer 200 with the finished run."
    )


# -- input ------------------------------------------------------------------------------------
class RunIn(In):
    mode = Choice(
        MODES,
        required=False,
        default=Run.Mode.PROMPT,
        message="mode must be 'prompt' or 'resume'.",
        enum="RunRequestMode",
    )
    messages = UserMessages()
    wait = wait()
    multitask_strategy = strategy()
    output_schema = JsonSchemaObject(
        required=False,
        allow_null=True,
        default=None,
        message="output_schema must be a JSON Schema object.",
    )
    checkpoint = Choice(
        CHECKPOINTS,
        required=False,
        allow_blank=True,
        default="",
        message=CHECKPOINT_MESSAGE,
        help_text="This run's checkpoint mode; empty: the session's.",
    )

    def validate_output_schema(self, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # A pattern RE2 refuses, a $ref loop, a schema too large or too deep: refused here
        # rather than failing (or stalling) the run at its end.
        if value is not None:
            try:
                output_schema.check(value)
            except output_schema.InvalidSchema as exc:
                raise refuse(str(exc)) from exc
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["mode"] == Run.Mode.RESUME and attrs["messages"]:
            raise refuse("messages is not allowed in resume mode.")
        if attrs["mode"] == Run.Mode.PROMPT and not attrs["messages"]:
            raise refuse("messages is required in prompt mode.")
        return attrs


class RunStreamIn(RunIn):
    def validate_output_schema(self, value: dict[str, Any] | None) -> None:
        if value is not None:
            raise refuse("output_schema is not supported on the streaming endpoint.")
        return None


class ContinueIn(In):
    continue_from = ContinueFrom(required=False, default="end", message=CONTINUE_FROM_MESSAGE)
    input = ContinueInput()
    fork = StrictBoolean(
        required=False,
        default=False,
        message="fork must be true or false.",
        help_text="A new sibling run even when the source could continue in place.",
    )
    multitask_strategy = strategy()
    wait = wait()


class RegenerateIn(In):
    replace_original = StrictBoolean(
        required=False,
        default=True,
        message="replace_original must be true or false.",
        help_text="Hide the source run and its answer from the history.",
    )
    multitask_strategy = strategy()
    wait = wait()


class ApproveIn(In):
    part_id = StrictString(message="part_id must be the id of a tool call that waits.")
    decision = Choice(
        ["allow", "deny", "always"],
        message="decision must be 'allow', 'deny' or 'always'.",
        enum="ApprovalDecision",
    )
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=2000,
        trim_whitespace=False,
        help_text="For deny: what the model is told.",
    )


class TranscriptQueryIn(serializers.Serializer):
    original = Flag(
        on=("1", "true"), help_text="Every message as stored, without compaction's summary."
    )


class RunsQueryIn(serializers.Serializer):
    all = Flag(on=("1", "true"), help_text="Also the runs a regenerate replaced.")


# -- output -----------------------------------------------------------------------------------
class RunErrorOut(Out):
    type = serializers.CharField()
    message = serializers.CharField()
    reason = serializers.CharField(
        required=False, help_text="'quota': the owner's budget ran out during the run."
    )
    limit = serializers.CharField(
        required=False, help_text="With reason 'quota': tokens_per_day or cost_per_month."
    )


class BranchOut(Out):
    parent_message_id = serializers.CharField(allow_null=True)
    continue_from = serializers.JSONField(help_text="'end', 'last_user' or K.")
    index = serializers.IntegerField(help_text="K snapped to a tool-safe point.")
    source_run_id = serializers.CharField()
    applied = serializers.BooleanField()


class ToolCallWaitingOut(Out):
    part_id = serializers.CharField()
    tool = serializers.CharField()
    input = serializers.JSONField()
    preview = serializers.CharField(help_text="The command, or the diff the write would make.")


class RequiredActionOut(Out):
    type = serializers.ChoiceField(["approve_tools"])
    tool_calls = ToolCallWaitingOut(many=True)


class RunOut(Out):
    id = serializers.CharField()
    session_id = serializers.CharField()
    mode = Enum("RunMode", Run.Mode.values)
    status = Enum("RunStatus", Run.Status.values)
    result = serializers.ChoiceField(["stop", "compact"], allow_null=True)
    stop_reason = serializers.CharField(allow_null=True)
    output = serializers.JSONField(allow_null=True, help_text="Structured output, if asked.")
    error = RunErrorOut(allow_null=True)
    input_message_id = serializers.CharField(allow_null=True)
    forked_from_run_id = serializers.CharField(allow_null=True)
    forked_from_message_index = serializers.IntegerField(allow_null=True)
    forked_from_session_id = serializers.CharField(allow_null=True)
    replaced_by = serializers.CharField(allow_null=True)
    branch = BranchOut(allow_null=True)
    multitask_strategy = serializers.ChoiceField(STRATEGIES)
    checkpoint = serializers.ChoiceField(CHECKPOINTS)
    model = serializers.CharField()
    usage = serializers.DictField()
    required_action = RequiredActionOut(allow_null=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


class AbortOut(Out):
    session = SessionOut()
    run = RunOut(allow_null=True, help_text="The run that held the session, if any.")


class ToolFunctionOut(Out):
    name = serializers.CharField()
    arguments = serializers.CharField(help_text="JSON text.")


class ToolCallOut(Out):
    id = serializers.CharField()
    type = Enum("ToolCallType", ["function"])
    function = ToolFunctionOut()


class TranscriptEntryOut(Out):
    """One model-API message: what ``continue_from`` K counts."""

    role = Enum("TranscriptRole", ["system", "user", "assistant", "tool"])
    content = serializers.CharField(allow_null=True)
    tool_calls = ToolCallOut(many=True, required=False)
    tool_call_id = serializers.CharField(required=False)


class CheckpointOut(Out):
    run_id = serializers.CharField()
    run_status = Enum("RunStatus", Run.Status.values)
    message_id = serializers.CharField()
    role = Enum("MessageRole", Message.Role.values)
    kind = serializers.ChoiceField(["input", "tool-batch", "answer"])
    step = serializers.IntegerField(allow_null=True)
    index = serializers.IntegerField(help_text="The K that continue_from takes for it.")
    snapshot = serializers.CharField(allow_null=True, help_text="The files there (a git tree).")
    preview = serializers.CharField()
    hidden = serializers.BooleanField()
    created_at = serializers.DateTimeField()


# -- export and import ------------------------------------------------------------------------
class ExportQueryIn(serializers.Serializer):
    format = Choice(
        ["json", "markdown"],
        required=False,
        default="json",
        message="format must be 'json' or 'markdown'.",
        enum="ExportFormat",
        help_text="json: the whole session, for an import; markdown: the active path to read.",
    )


class ExportSessionOut(Out):
    id = serializers.CharField(help_text="The source's id (an import gives a new one).")
    title = serializers.CharField()
    model = serializers.CharField()
    system_prompt = serializers.CharField()
    checkpoint = serializers.ChoiceField(CHECKPOINTS)
    permissions = serializers.DictField(help_text="The session's own tool rules.")
    head_message_id = serializers.CharField(allow_null=True)
    revert = RevertOut(allow_null=True, required=False)
    summary = serializers.DictField(required=False)
    usage = serializers.DictField(required=False)
    context_tokens = serializers.IntegerField(required=False)
    forked_from_session_id = serializers.CharField(allow_null=True, required=False)
    forked_from_message_id = serializers.CharField(allow_null=True, required=False)
    created_at = serializers.DateTimeField(allow_null=True, required=False)
    updated_at = serializers.DateTimeField(allow_null=True, required=False)


class ExportPartOut(Out):
    """A part's stored columns (not flattened as in message lists)."""

    id = serializers.CharField()
    order = serializers.IntegerField()
    type = Enum("PartType", Part.Type.values)
    text = serializers.CharField(required=False)
    call_id = serializers.CharField(required=False)
    tool = serializers.CharField(required=False)
    state = ToolStateOut(allow_null=True, required=False)
    data = serializers.DictField(
        required=False, help_text="snapshot, step, files, skipped, replaced…, by type."
    )


class ExportMessageOut(Out):
    id = serializers.CharField()
    parent_id = serializers.CharField(allow_null=True)
    role = Enum("MessageRole", Message.Role.values)
    run_id = serializers.CharField(allow_null=True, required=False)
    created_at = serializers.DateTimeField()
    completed_at = serializers.DateTimeField(allow_null=True, required=False)
    error = MessageErrorOut(allow_null=True, required=False)
    model = serializers.CharField(required=False)
    tokens = serializers.DictField(required=False)
    structured = serializers.JSONField(allow_null=True, required=False)
    hidden = serializers.BooleanField(required=False)
    parts = ExportPartOut(many=True)


class ExportRunOut(Out):
    id = serializers.CharField()
    mode = Enum("RunMode", Run.Mode.values)
    status = Enum("RunStatus", Run.Status.values)
    result = serializers.CharField(allow_null=True, required=False)
    input = serializers.ListField(child=serializers.DictField(), required=False)
    input_message_id = serializers.CharField(allow_null=True, required=False)
    output_schema = serializers.JSONField(allow_null=True, required=False)
    output = serializers.JSONField(allow_null=True, required=False)
    error = serializers.JSONField(allow_null=True, required=False)
    model = serializers.CharField(required=False)
    checkpoint = serializers.ChoiceField(CHECKPOINTS, required=False)
    multitask_strategy = serializers.ChoiceField(STRATEGIES, required=False)
    max_steps = serializers.IntegerField(required=False)
    abort_requested = serializers.BooleanField(required=False)
    interrupted_run_id = serializers.CharField(allow_null=True, required=False)
    forked_from_run_id = serializers.CharField(allow_null=True, required=False)
    forked_from_message_index = serializers.IntegerField(allow_null=True, required=False)
    forked_from_session_id = serializers.CharField(allow_null=True, required=False)
    branch = serializers.DictField(allow_null=True, required=False)
    replaced_by = serializers.CharField(allow_null=True, required=False)
    usage = serializers.DictField(required=False)
    attempts = serializers.IntegerField(required=False)
    created_at = serializers.DateTimeField(allow_null=True, required=False)
    started_at = serializers.DateTimeField(allow_null=True, required=False)
    finished_at = serializers.DateTimeField(allow_null=True, required=False)


class ExportFileOut(Out):
    path = serializers.CharField(help_text="Relative, '/'-separated.")
    encoding = Enum("FileEncoding", ["utf-8", "base64"])
    content = serializers.CharField()
    executable = serializers.BooleanField(required=False)


class ExportSkippedOut(Out):
    path = serializers.CharField()
    reason = serializers.ChoiceField(["symlink", "special", "name"])


class ExportObjectOut(Out):
    id = serializers.CharField(help_text="The git object id: the SHA-1 of its content.")
    type = Enum("GitObjectType", ["tree", "blob"])
    data = serializers.CharField(help_text="The object's body, base64.")


class SessionExportOut(Out):
    """A session export (``format`` agentplat-session, ``version`` 1): what the JSON export
    answers and what an import takes."""

    format = serializers.ChoiceField(["agentplat-session"])
    version = serializers.ChoiceField([1])
    exported_at = serializers.DateTimeField(required=False)
    session = ExportSessionOut()
    messages = ExportMessageOut(many=True, help_text="Every message of every branch.")
    runs = ExportRunOut(many=True)
    files = ExportFileOut(many=True, help_text="The worktree's files.")
    skipped = ExportSkippedOut(many=True, required=False, help_text="Files left out.")
    objects = ExportObjectOut(
        many=True, help_text="The snapshots' git objects (what revert and diff read)."
    )
    missing_objects = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="Objects the store had lost."
    )


class ToolOut(Out):
    name = serializers.CharField()
    side_effects = serializers.BooleanField()
    available = serializers.BooleanField(help_text="False where the deployment disables it.")
    reason = serializers.CharField(help_text="Why it is not available ('' when it is).")


class ToolsOut(Out):
    results = ToolOut(many=True)
