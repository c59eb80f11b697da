"""Reads of usage and quotas: what ``GET /api/usage/`` and ``GET /api/usage/quota/`` answer.
What this app cannot count (runs in progress, sessions held, session titles) the caller
passes in."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, Sum
from django.db.models.functions import Coalesce, TruncDate

from core.errors import NotFoundError, PermissionDeniedError

from . import clock
from .limits import NAMES, effective
from .models import UsageRecord
from .services import MINUTE, next_day, next_month, recent_admissions, spent

GROUPS = ("day", "model", "session")
UNITS = {
    "runs_per_minute": "runs",
    "tokens_per_day": "tokens",
    "cost_per_month": "usd",
    "concurrent_runs": "runs",
    "sessions": "sessions",
    "worktree_bytes": "bytes",
}


def usage_owner(requester: AbstractBaseUser | AnonymousUser, wanted: str | None) -> Any:
    """Whose usage ``requester`` asks for: their own; with ``?user=`` (a username or an id)
    a superuser may name anyone (404 for nobody), others only themselves (403 otherwise:
    staff see their own usage, not their colleagues')."""
    if not wanted:
        return requester
    if wanted in (requester.get_username(), str(requester.pk)):
        return requester
    if not getattr(requester, "is_superuser", False):
        raise PermissionDeniedError("Only a superuser may see another user's usage.")
    users = get_user_model().objects
    found = users.filter(username=wanted).first()
    if found is None and wanted.isdigit():
        found = users.filter(pk=int(wanted)).first()
    if found is None:
        raise NotFoundError(f"No user {wanted!r}.")
    return found


def _money(value: Any) -> float:
    return float(round(Decimal(value or 0), 8))


def _sums(rows: dict[str, Any]) -> dict[str, Any]:
    inp, out = int(rows["input_tokens"] or 0), int(rows["output_tokens"] or 0)
    return {
        "calls": int(rows["calls"] or 0),
        "input_tokens": inp,
        "output_tokens": out,
        "cached_input_tokens": int(rows["cached_input_tokens"] or 0),
        "tokens": inp + out,
        "cost_usd": _money(rows["cost_usd"]),
    }


SUMS = {
    "calls": Count("id"),
    "input_tokens": Coalesce(Sum("input_tokens"), 0),
    "output_tokens": Coalesce(Sum("output_tokens"), 0),
    "cached_input_tokens": Coalesce(Sum("cached_input_tokens"), 0),
    "cost_usd": Sum("cost_usd"),
}


def usage_report(
    *,
    user_id: int,
    start: datetime,
    end: datetime,
    group_by: str,
    max_rows: int,
    titles: Callable[[list[str]], dict[str, str]] | None = None,
) -> dict[str, Any]:
    """The user's model calls in [start, end): totals, and rows by UTC day (oldest first), by
    model or by session (the costliest first), at most ``max_rows`` (``truncated`` then).
    Two queries on the (user, created_at) index; ``titles`` names the sessions."""
    calls = UsageRecord.objects.filter(user_id=user_id, created_at__gte=start, created_at__lt=end)
    totals = _sums(calls.aggregate(**SUMS))
    if group_by == "day":
        grouped = (
            calls.annotate(day=TruncDate("created_at", tzinfo=UTC))
            .values("day")
            .annotate(**SUMS)
            .order_by("day")
        )
        key = "day"
    else:
        key = "model" if group_by == "model" else "session_id"
        grouped = calls.values(key).annotate(**SUMS).order_by("-cost_usd", "-output_tokens", key)
    found = list(grouped[: max_rows + 1])
    rows = [{key: row[key], **_sums(row)} for row in found[:max_rows]]
    if group_by == "session" and titles is not None:
        named = titles([row["session_id"] for row in rows])
        for row in rows:
            row["title"] = named.get(row["session_id"])  # None: the session was deleted
    return {
        "from": start,
        "to": end,
        "group_by": group_by,
        "totals": totals,
        "rows": rows,
        "truncated": len(found) > max_rows,
    }


def quota_status(*, user_id: int, active_runs: int, sessions: int) -> dict[str, Any]:
    """Each of the user's limits with what is used of it, what remains and when it resets
    (``None``: unlimited / not counted / not by time)."""
    limits = effective(user_id)
    now = clock.now()
    used = spent(user_id, now)
    lines: dict[str, dict[str, Any]] = {}
    for name in NAMES:
        limit = getattr(limits, name)
        lines[name] = {"limit": limit, "used": None, "resets_at": None}
    rate = limits.runs_per_minute
    if rate is not None:
        recent = recent_admissions(user_id, now, rate)
        lines["runs_per_minute"].update(
            used=len(recent), resets_at=recent[0] + MINUTE if recent else None
        )
    lines["tokens_per_day"].update(used=used.tokens_today, resets_at=next_day(now))
    lines["cost_per_month"].update(used=used.cost_this_month, resets_at=next_month(now))
    lines["concurrent_runs"]["used"] = active_runs
    lines["sessions"]["used"] = sessions
    for name, line in lines.items():
        limit, taken = line["limit"], line["used"]
        line["remaining"] = (
            max(limit - taken, 0) if limit is not None and taken is not None else None
        )
        if name == "cost_per_month":
            line.update(
                {
                    k: _money(line[k]) if line[k] is not None else None
                    for k in ("limit", "used", "remaining")
                }
            )
        line["unit"] = UNITS[name]
        line["source"] = limits.sources[name]
    return {"now": now, "quotas": lines}
