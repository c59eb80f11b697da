"""A user's effective limits, from three levels:

1. **the user's own quota** (a ``Quota`` row of the user): a limit set there wins, larger or
   smaller than their groups';
2. else **the most generous of their groups'** quotas that set it: the largest number, or
   unlimited when one of those groups sets 0 (unlimited, said explicitly). A group that
   leaves the limit blank says nothing: it neither limits nor frees;
3. else **the deployment's default** (settings): ``QUOTA_RUNS_PER_MINUTE``,
   ``QUOTA_TOKENS_PER_DAY``, ``QUOTA_COST_PER_MONTH``, ``QUOTA_CONCURRENT_RUNS`` (unset or 0:
   unlimited), ``SESSIONS_PER_USER_MAX`` and ``WORKTREE_MAX_BYTES`` (0: unlimited).

In every level 0 means unlimited; resolved, unlimited is ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings
from django.db.models import Q

from core.compiled import Compiled

from .models import Quota

NAMES = (
    "runs_per_minute",
    "tokens_per_day",
    "cost_per_month",
    "concurrent_runs",
    "sessions",
    "worktree_bytes",
)
# The limits a run request is checked against (sessions and worktree bytes are checked
# where a session is made and where a tool writes).
RUN_LIMITS = ("runs_per_minute", "tokens_per_day", "cost_per_month", "concurrent_runs")

Value = int | Decimal


@dataclass(frozen=True)
class Limits:
    runs_per_minute: int | None = None
    tokens_per_day: int | None = None
    cost_per_month: Decimal | None = None
    concurrent_runs: int | None = None
    sessions: int | None = None
    worktree_bytes: int | None = None
    # Where each limit comes from: "user", "group:<name>" or "default".
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def limits_runs(self) -> bool:
        return any(getattr(self, name) is not None for name in RUN_LIMITS)

    def limits_spending(self) -> bool:
        """A budget a run may cross mid-way: tokens per day or cost per month."""
        return self.tokens_per_day is not None or self.cost_per_month is not None


def defaults() -> dict[str, Value]:
    """The deployment's limits (0 = unlimited), read at each call: tests and operators may
    change settings without a restart of this module."""
    return {
        "runs_per_minute": int(settings.QUOTA_RUNS_PER_MINUTE or 0),
        "tokens_per_day": int(settings.QUOTA_TOKENS_PER_DAY or 0),
        "cost_per_month": Decimal(str(settings.QUOTA_COST_PER_MONTH or 0)),
        "concurrent_runs": int(settings.QUOTA_CONCURRENT_RUNS or 0),
        "sessions": int(settings.SESSIONS_PER_USER_MAX or 0),
        "worktree_bytes": int(settings.WORKTREE_MAX_BYTES or 0),
    }


def resolve(user_row: dict | None, group_rows: list[dict]) -> Limits:
    """The rule of the module's docstring over already-fetched rows (``values()`` of
    ``Quota``, each group row with ``group__name``)."""
    resolved: dict[str, Value | None] = {}
    sources: dict[str, str] = {}
    fallback = defaults()
    for name in NAMES:
        own = user_row.get(name) if user_row else None
        if own is not None:
            value, source = own, "user"
        else:
            said = [(row[name], row["group__name"]) for row in group_rows if row[name] is not None]
            if said:
                value, source = max(said, key=lambda pair: (pair[0] == 0, pair[0]))
                source = f"group:{source}"
            else:
                value, source = fallback[name], "default"
        resolved[name] = value or None  # 0 = unlimited
        sources[name] = source
    return Limits(**resolved, sources=sources)  # type: ignore[arg-type]


# Every run request and every run start reads the limits: compiled once (core/compiled.py).
_QUOTA_ROWS = Compiled(
    lambda user_id: Quota.objects.filter(Q(user_id=user_id) | Q(group__user=user_id)).values(
        "user_id", "group__name", *NAMES
    ),
    user_id=int,
)


def effective(user_id: int) -> Limits:
    """The user's limits: one query for their own quota and their groups'."""
    rows = _QUOTA_ROWS.dicts(user_id=user_id)
    own = next((row for row in rows if row["user_id"] == user_id), None)
    return resolve(own, [row for row in rows if row["user_id"] is None])
