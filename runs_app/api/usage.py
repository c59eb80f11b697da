"""``GET /api/usage/`` (what the caller's model calls used) and ``GET /api/usage/quota/``
(their limits, what is used of them and when they reset): thin views over
``runs_app.usage``; docs/quotas.md has the shapes."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.base import ApiViewSet
from api.serializers import Choice, Out, refuse
from quotas_app.limits import NAMES
from quotas_app.selectors import GROUPS, usage_owner

from ..usage import quota_of, usage_of

# -- input ----------------------------------------------------------------------------------
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)


@extend_schema_field(OpenApiTypes.STR)
class Moment(serializers.Field):
    """A date (``2025-03-01``: that UTC day) or an ISO 8601 date-time (UTC when naive)."""

    def __init__(self, *, end: bool = False, **kwargs: Any) -> None:
        self.end = end  # a date ends with its day: ``to`` is exclusive after it
        super().__init__(required=False, **kwargs)

    def to_internal_value(self, data: Any) -> datetime:
        try:
            moment = self._moment(str(data).strip())
            # In UTC, and far enough from the calendar's ends that the default range
            # (30 days before ``to``) and the database's UTC conversion stay inside it.
            moment = moment.astimezone(UTC)
            if not EARLIEST <= moment <= LATEST:
                raise OverflowError
        except OverflowError:
            raise refuse(
                f"{self.field_name} must be between {EARLIEST.date()} and {LATEST.date()}."
            ) from None
        return moment

    def _moment(self, text: str) -> datetime:
        try:
            day = date.fromisoformat(text)
        except ValueError:
            day = None
        if day is not None:
            moment = datetime.combine(day, time(), tzinfo=UTC)
            return moment + timedelta(days=1) if self.end else moment  # 9999-12-31: overflow
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise refuse(
                f"{self.field_name} must be a date (YYYY-MM-DD) or an ISO 8601 date-time."
            ) from None
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)

    def to_representation(self, value: datetime) -> str:
        return value.isoformat()


class UsageQueryIn(serializers.Serializer):
    from_ = Moment(help_text="Start (inclusive); default: 30 days before `to`.")
    to = Moment(end=True, help_text="End (exclusive; a date counts its whole day); default: now.")
    group_by = Choice(
        list(GROUPS),
        required=False,
        default="day",
        message="group_by must be 'day', 'model' or 'session'.",
        enum="UsageGroupBy",
    )
    user = serializers.CharField(
        required=False, help_text="Superusers: a username or id; others only themselves."
    )

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")  # ``from`` is a Python keyword
        return fields

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        end = attrs.get("to") or datetime.now(UTC)
        start = attrs.get("from") or end - timedelta(days=30)
        if start >= end:
            raise serializers.ValidationError({"non_field_errors": ["from must be before to."]})
        days = settings.USAGE_API_MAX_DAYS
        if end - start > timedelta(days=days):
            raise serializers.ValidationError(
                {"non_field_errors": [f"The range may span at most {days:,} days."]}
            )
        return {**attrs, "from": start, "to": end}


class QuotaQueryIn(serializers.Serializer):
    user = serializers.CharField(
        required=False, help_text="Superusers: a username or id; others only themselves."
    )


# -- output ---------------------------------------------------------------------------------
class UsageUserOut(Out):
    id = serializers.IntegerField()
    username = serializers.CharField()


class UsageSumsOut(Out):
    calls = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cached_input_tokens = serializers.IntegerField()
    tokens = serializers.IntegerField(help_text="input_tokens + output_tokens.")
    cost_usd = serializers.FloatField()


class UsageRowOut(UsageSumsOut):
    day = serializers.DateField(required=False, help_text="group_by=day (UTC).")
    model = serializers.CharField(required=False, help_text="group_by=model.")
    session_id = serializers.CharField(required=False, help_text="group_by=session.")
    title = serializers.CharField(
        required=False, allow_null=True, help_text="group_by=session; null once deleted."
    )


class UsageOut(Out):
    user = UsageUserOut()
    from_ = serializers.DateTimeField()
    to = serializers.DateTimeField()
    group_by = serializers.CharField()
    totals = UsageSumsOut()
    rows = UsageRowOut(many=True)
    truncated = serializers.BooleanField(help_text="More rows than USAGE_API_MAX_ROWS.")

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")
        return fields


class QuotaLineOut(Out):
    limit = serializers.FloatField(allow_null=True, help_text="null: unlimited.")
    used = serializers.FloatField(allow_null=True, help_text="null: not counted.")
    remaining = serializers.FloatField(allow_null=True)
    resets_at = serializers.DateTimeField(allow_null=True)
    unit = serializers.CharField()
    source = serializers.CharField(help_text="'user', 'group:<name>' or 'default'.")


QuotaLinesOut = type("QuotaLinesOut", (Out,), {name: QuotaLineOut() for name in NAMES})


class QuotaOut(Out):
    user = UsageUserOut()
    now = serializers.DateTimeField()
    quotas = QuotaLinesOut()


# -- views ----------------------------------------------------------------------------------
class UsageViewSet(ApiViewSet):
    @extend_schema(parameters=[UsageQueryIn], responses={200: UsageOut})
    def usage(self, request: Request) -> Response:
        args = self.query(UsageQueryIn)
        user = usage_owner(request.user, args.get("user"))
        report = usage_of(user, start=args["from"], end=args["to"], group_by=args["group_by"])
        return Response(report)

    @extend_schema(parameters=[QuotaQueryIn], responses={200: QuotaOut})
    def quota(self, request: Request) -> Response:
        args = self.query(QuotaQueryIn)
        return Response(quota_of(usage_owner(request.user, args.get("user"))))
