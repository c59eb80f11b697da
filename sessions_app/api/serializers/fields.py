"""The session API's own fields: tool rules (``Permissions``) and the page size
(``PageLimit``), each checked by this app's rule and refused in its sentence. Every other
block a serializer is made of is the API's (``api.serializers``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.serializers import refuse
from core.errors import InvalidInput

from ... import permissions
from ...selectors import page_limit


class Permissions(serializers.JSONField):
    """Tool rules, ``{"<tool>": "allow"|"ask"|"deny" | {"<pattern>": rule}}``, checked by
    ``sessions_app.permissions.validate`` (its sentence is the refusal)."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        try:
            return permissions.validate(data)
        except ValueError as exc:
            raise refuse(str(exc)) from exc


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
