"""What every serializer of the API is made of: refusals in the API's own words (one
sentence, shown as it is), the strict fields that refuse in them, and the two bases: ``In``
(a request's body or query) and ``Out`` (an answer's shape, declared for the schema). The
fields that follow a session's rules (tool permissions, the page size) are
``sessions_app.api.serializers.fields``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

from drf_spectacular.drainage import set_override
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.settings import api_settings

from .errors import SENTENCE


def refuse(message: str) -> serializers.ValidationError:
    """A refusal in the API's own words: the message is shown as it is (``SENTENCE``)."""
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


# -- bases ------------------------------------------------------------------------------------
class In(serializers.Serializer):
    # A request's body: a JSON object.
    default_error_messages = {"invalid": "The body must be a JSON object."}

    def run_validation(self, data: Any = serializers.empty) -> Any:
        if data is None:  # a JSON ``null`` body (DRF would answer "No data provided")
            raise refuse_body(self.error_messages["invalid"])
        return super().run_validation(data)


class Out(serializers.Serializer):
    # An answer's shape, declared for the schema: its component is named without the "Out".
    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        set_override(cls, "component_name", cls.__name__.removesuffix("Out"))


class PageLinks(Out):
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
