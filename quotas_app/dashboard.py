"""The usage reads of the admin's Usage dashboard (``runs_app/dashboard.py`` is the page):
the model calls of a range, of everyone or of one user, summed by UTC day and model or user,
by user, by model and by session, and the rows themselves, chunk by chunk, for the CSV
export. Each read is
one query, whatever the number of users, models or days (the page counts its queries)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django import forms
from django.conf import settings
from django.db.models import Case, CharField, Count, F, Q, QuerySet, Sum, Value, When
from django.db.models.functions import Coalesce, TruncDate

from .models import UsageRecord

# The series a daily chart stacks: the costliest few, the rest summed as one.
SERIES_MAX = 7
OTHERS = "(others)"  # neither a username (letters, digits, @.+-_) nor a model's name

# ``tokens`` first: after them, ``input_tokens`` names the sum, not the column.
SUMS = {
    "tokens": Coalesce(Sum(F("input_tokens") + F("output_tokens")), 0),
    "calls": Count("id"),
    "input_tokens": Coalesce(Sum("input_tokens"), 0),
    "output_tokens": Coalesce(Sum("output_tokens"), 0),
    "cost_usd": Coalesce(Sum("cost_usd"), Value(Decimal(0))),
}
KEYS = {"model": "model", "user": "user__username"}


def usage_in(
    *, start: datetime, end: datetime, user_id: int | None, group_id: int | None
) -> QuerySet[UsageRecord]:
    """The model calls in [start, end): of ``user_id`` (None: everyone's, for a superuser),
    of the members of ``group_id`` (None: any)."""
    calls = UsageRecord.objects.filter(created_at__gte=start, created_at__lt=end)
    if user_id is not None:
        calls = calls.filter(user_id=user_id)
    if group_id is not None:
        calls = calls.filter(user__groups=group_id)
    return calls


@dataclass(frozen=True)
class Daily:
    """Tokens and cost per UTC day of each series (a model or a username, most costly
    first, ``OTHERS`` last)."""

    days: list[date]
    series: list[str]
    tokens: dict[str, dict[date, int]] = field(default_factory=dict)
    cost: dict[str, dict[date, Decimal]] = field(default_factory=dict)


def totals(calls: QuerySet[UsageRecord]) -> dict[str, Any]:
    return calls.aggregate(**SUMS)


def by_key(calls: QuerySet[UsageRecord], key: str, limit: int) -> list[dict[str, Any]]:
    """Sums by model (``key="model"``) or by user (``"user"``: with ``user_id`` and
    ``username``), the costliest first, then the most tokens."""
    names = ("model",) if key == "model" else ("user_id", "user__username")
    rows = calls.values(*names).annotate(**SUMS).order_by("-cost_usd", "-tokens", *names)
    found = list(rows[:limit])
    for row in found:
        row["name"] = row.get("model") if key == "model" else row["user__username"]
    return found


def daily(
    calls: QuerySet[UsageRecord], *, start: date, end: date, key: str, top: list[str]
) -> Daily:
    """Sums by UTC day (``start`` to ``end`` inclusive) and by ``key`` (model or user): the
    names in ``top`` each a series, the rest in ``OTHERS``. One query."""
    column = KEYS[key]
    bucket = Case(
        When(**{f"{column}__in": top}, then=F(column)),
        default=Value(OTHERS),
        output_field=CharField(),
    )
    rows = (
        calls.annotate(day=TruncDate("created_at", tzinfo=UTC), series=bucket)
        .values("day", "series")
        .annotate(tokens=SUMS["tokens"], cost_usd=SUMS["cost_usd"])
        .order_by("day", "series")
    )
    days = [start + timedelta(days=i) for i in range((end - start).days + 1)]
    tokens: dict[str, dict[date, int]] = {}
    cost: dict[str, dict[date, Decimal]] = {}
    for row in rows:
        tokens.setdefault(row["series"], {})[row["day"]] = int(row["tokens"])
        cost.setdefault(row["series"], {})[row["day"]] = Decimal(row["cost_usd"])
    series = [name for name in top if name in tokens]
    if OTHERS in tokens:
        series.append(OTHERS)
    return Daily(days, series, tokens, cost)


def top_sessions(calls: QuerySet[UsageRecord], limit: int) -> list[dict[str, Any]]:
    """The sessions that cost the most in the range (then used the most tokens)."""
    rows = (
        calls.values("session_id", "user__username")
        .annotate(**SUMS)
        .order_by("-cost_usd", "-tokens", "session_id")
    )
    return list(rows[:limit])


CSV_FIELDS = (
    "created_at",
    "user_id",
    "user__username",
    "session_id",
    "run_id",
    "message_id",
    "model",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cost_usd",
)
# The CSV's header: the fields as they are named, the owner's as "username".
CSV_COLUMNS = tuple("username" if f == "user__username" else f for f in CSV_FIELDS)


def csv_chunk(
    calls: QuerySet[UsageRecord], *, after: tuple[datetime, int] | None, size: int
) -> tuple[list[tuple[Any, ...]], tuple[datetime, int] | None]:
    """The next ``size`` calls after ``after`` (oldest first) as ``CSV_COLUMNS``, and where
    the chunk ends. Each chunk is a query of its own that seeks past the last one (no cursor
    held open between chunks, which an export streamed to a slow client would pin)."""
    if after is not None:
        at, pk = after
        calls = calls.filter(Q(created_at__gt=at) | Q(created_at=at, id__gt=pk))
    found = list(calls.order_by("created_at", "id").values_list("id", *CSV_FIELDS)[:size])
    rows = [(row[1].astimezone(UTC).isoformat(), *row[2:]) for row in found]
    return rows, (found[-1][1], found[-1][0]) if found else None


def today() -> date:
    return datetime.now(UTC).date()


def date_range(
    data: dict[str, Any], default_days: int, names: str = "from / to"
) -> tuple[date, date]:
    """The days a usage form's ``from`` and ``to`` name (both included; by default the last
    ``default_days`` to today), at most ``USAGE_API_MAX_DAYS`` of them; ``names``: how the
    form labels the two, for the error."""
    end = data.get("to") or today()
    start = data.get("from") or end - timedelta(days=default_days - 1)
    first, last = names.split(" / ")
    if start > end:
        raise forms.ValidationError(f"{first} must not be after {last}.")
    days = settings.USAGE_API_MAX_DAYS
    if (end - start).days + 1 > days:
        raise forms.ValidationError(f"The range may span at most {days:,} days.")
    return start, end
