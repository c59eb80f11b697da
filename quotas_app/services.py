"""The checks where work is admitted, and the recording of what model calls used.

**Atomic admission.** A check runs inside the transaction that saves what it admits (a run,
a session) and first locks the owner's user row (``lock_user``): two requests of one user
are decided one after the other, each seeing what the other saved, so a limit of N admits
exactly N however many arrive at once. Lock order (``sessions_app/services/lock.py``): the
session row, then run rows, then messages, then the user row: nothing here locks a session.
When none of a user's run limits is set, a run request takes no lock at all.

**Windows** (all UTC, from ``clock.now``): runs per minute is a sliding 60 seconds (the next
run is allowed when the oldest of the last N leaves it); tokens per day is the calendar day;
cost per month is the calendar month; concurrent runs and sessions are counts now.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection

from core.compiled import CompiledInsert
from core.errors import QuotaExceeded

from . import clock
from .limits import Limits, effective
from .models import RunAdmission, UsageCounter, UsageRecord

MINUTE = timedelta(seconds=60)


# -- windows --------------------------------------------------------------------------------
def day_start(at: datetime) -> date:
    return at.astimezone(UTC).date()


def month_start(at: datetime) -> date:
    return day_start(at).replace(day=1)


def next_day(at: datetime) -> datetime:
    start = day_start(at)
    return datetime(start.year, start.month, start.day, tzinfo=UTC) + timedelta(days=1)


def next_month(at: datetime) -> datetime:
    start = month_start(at)
    if start.month == 12:
        return datetime(start.year + 1, 1, 1, tzinfo=UTC)
    return datetime(start.year, start.month + 1, 1, tzinfo=UTC)


def when(at: datetime, now: datetime) -> str:
    """``12:01:30 UTC``, with the date when it is not today."""
    at = at.astimezone(UTC)
    if at.date() == now.astimezone(UTC).date():
        return at.strftime("%H:%M:%S UTC")
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def refuse(message: str, *, resets_at: datetime | None, now: datetime) -> QuotaExceeded:
    retry = math.ceil((resets_at - now).total_seconds()) if resets_at else None
    return QuotaExceeded(
        message,
        retry_after=max(1, retry) if retry is not None else None,
        resets_at=resets_at.astimezone(UTC).isoformat().replace("+00:00", "Z")
        if resets_at
        else None,
    )


# -- reads ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Spent:
    """A user's usage in the current day and month."""

    tokens_today: int = 0
    cost_this_month: Decimal = Decimal(0)


def spent(user_id: int, now: datetime) -> Spent:
    """Today's tokens and this month's cost: one query of two counter rows."""
    day, month = day_start(now), month_start(now)
    rows = UsageCounter.objects.filter(
        user_id=user_id,
        period__in=(UsageCounter.Period.DAY, UsageCounter.Period.MONTH),
        start__in=(day, month),
    ).values_list("period", "start", "input_tokens", "output_tokens", "cost_usd")
    tokens, cost = 0, Decimal(0)
    for period, start, inp, out, usd in rows:
        if period == UsageCounter.Period.DAY and start == day:
            tokens = inp + out
        elif period == UsageCounter.Period.MONTH and start == month:
            cost = Decimal(usd)
    return Spent(tokens, cost)


def recent_admissions(user_id: int, now: datetime, limit: int) -> list[datetime]:
    """The times of the user's runs admitted in the last minute, oldest first: at most
    ``limit`` rows read from the (user, created_at) index."""
    newest = list(
        RunAdmission.objects.filter(user_id=user_id, created_at__gt=now - MINUTE)
        .order_by("-created_at")
        .values_list("created_at", flat=True)[:limit]
    )
    return newest[::-1]


def lock_user(user_id: int) -> None:
    get_user_model().objects.select_for_update().filter(pk=user_id).values_list("pk").first()


# -- checks ---------------------------------------------------------------------------------
def check_budget(limits: Limits, used: Spent, now: datetime) -> None:
    """Refuse (429) when today's tokens or this month's cost already reached the limit."""
    if limits.tokens_per_day is not None and used.tokens_today >= limits.tokens_per_day:
        raise refuse(tokens_sentence(limits, used, now), resets_at=next_day(now), now=now)
    if limits.cost_per_month is not None and used.cost_this_month >= limits.cost_per_month:
        raise refuse(cost_sentence(limits, used, now), resets_at=next_month(now), now=now)


def tokens_sentence(limits: Limits, used: Spent, now: datetime) -> str:
    return (
        f"You have used {used.tokens_today:,} of your {limits.tokens_per_day:,} tokens per day;"
        f" the budget resets at {when(next_day(now), now)}."
    )


def cost_sentence(limits: Limits, used: Spent, now: datetime) -> str:
    return (
        f"You have spent ${used.cost_this_month:,.4f} of your ${limits.cost_per_month:,.2f}"
        f" per month; the budget resets at {when(next_month(now), now)}."
    )


def admit_run(
    *, user_id: int, run_id: str, active_runs: Callable[[], int], limits: Limits | None = None
) -> None:
    """Inside the transaction that saves run ``run_id`` of ``user_id`` (after its session row
    lock): refuse it (429 ``QuotaExceeded``) past a run limit, else record its admission.
    ``active_runs`` counts the user's runs not yet ended, other than this one."""
    limits = limits or effective(user_id)
    if not limits.limits_runs():
        return
    lock_user(user_id)
    now = clock.now()
    if limits.limits_spending():
        check_budget(limits, spent(user_id, now), now)
    if limits.concurrent_runs is not None:
        running = active_runs()
        if running >= limits.concurrent_runs:
            raise QuotaExceeded(
                f"You have {running:,} runs in progress and your limit is"
                f" {limits.concurrent_runs:,} concurrent runs; start another when one ends."
            )
    if limits.runs_per_minute is not None:
        rate = limits.runs_per_minute
        recent = recent_admissions(user_id, now, rate)
        if len(recent) >= rate:
            allowed = recent[0] + MINUTE
            raise refuse(
                f"You have used {len(recent):,} of your {rate:,} runs per minute;"
                f" the next one is allowed at {when(allowed, now)}.",
                resets_at=allowed,
                now=now,
            )
        RunAdmission.objects.filter(user_id=user_id, created_at__lte=now - MINUTE).delete()
        RunAdmission.objects.create(user_id=user_id, run_id=run_id, created_at=now)


def check_room(
    *,
    user_id: int,
    n: int,
    what: str,
    sessions_held: Callable[[], int],
    active_runs: Callable[[], int],
) -> None:
    """Room for ``n`` more sessions each running a run now (``n`` ``what``: alternatives of a
    turn), or ``QuotaExceeded`` naming the limit, before anything is made. ``sessions_held``
    and ``active_runs`` count the user's sessions and runs not yet ended."""
    limits = effective(user_id)
    if limits.sessions is not None:
        held = sessions_held()
        if held + n > limits.sessions:
            raise QuotaExceeded(
                f"{n} {what} need {n} new sessions: you have {held:,} and your quota "
                f"allows {limits.sessions:,}. Nothing was started."
            )
    if limits.concurrent_runs is not None:
        running = active_runs()
        if running + n > limits.concurrent_runs:
            raise QuotaExceeded(
                f"{n} {what} run {n} runs at once: you have {running:,} in progress and "
                f"your limit is {limits.concurrent_runs:,} concurrent runs. Nothing was started."
            )
    now = clock.now()
    if limits.runs_per_minute is not None:
        recent = recent_admissions(user_id, now, limits.runs_per_minute)
        if len(recent) + n > limits.runs_per_minute:
            raise QuotaExceeded(
                f"{n} {what} are {n} runs: you have used {len(recent):,} of your "
                f"{limits.runs_per_minute:,} runs per minute. Nothing was started."
            )
    if limits.limits_spending():
        check_budget(limits, spent(user_id, now), now)


def check_sessions(*, user_id: int, count: Callable[[], int]) -> None:
    """Inside the transaction that creates a session of ``user_id``: refuse it past the
    user's session limit. ``count``: the sessions they hold now."""
    limit = effective(user_id).sessions
    if limit is None:
        return
    lock_user(user_id)
    held = count()
    if held >= limit:
        raise QuotaExceeded(
            f"You have {held:,} sessions, the most your quota allows ({limit:,});"
            " delete some first."
        )


@dataclass(frozen=True)
class Overrun:
    """A run that crossed a budget mid-way: the sentence its error carries."""

    name: str
    message: str


def overrun(user_id: int, limits: Limits, *, pending: Spent | None = None) -> Overrun | None:
    """Between the steps of a run: has the user reached today's tokens or this month's cost,
    counting ``pending`` (used by this run, not written yet)? None while within both."""
    if not limits.limits_spending():
        return None
    now = clock.now()
    used = spent(user_id, now)
    if pending is not None:
        used = Spent(
            used.tokens_today + pending.tokens_today,
            used.cost_this_month + pending.cost_this_month,
        )
    if limits.tokens_per_day is not None and used.tokens_today >= limits.tokens_per_day:
        return Overrun("tokens_per_day", tokens_sentence(limits, used, now))
    if limits.cost_per_month is not None and used.cost_this_month >= limits.cost_per_month:
        return Overrun("cost_per_month", cost_sentence(limits, used, now))
    return None


# -- recording ------------------------------------------------------------------------------
def usage_record(
    *,
    user_id: int,
    session_id: str,
    run_id: str,
    message_id: str,
    model: str,
    usage: dict[str, Any],
) -> UsageRecord:
    """An unsaved record of one model call (``usage`` as a message's ``tokens``), stamped
    now; ``record_usage`` writes it with the message."""
    return UsageRecord(
        user_id=user_id,
        session_id=session_id,
        run_id=run_id,
        message_id=message_id,
        model=model[:200],
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        cached_input_tokens=int(usage.get("cached_input_tokens") or 0),
        cost_usd=Decimal(str(usage.get("cost_usd") or 0)),
        created_at=clock.now(),
    )


def pending_spent(records: Iterable[UsageRecord], now: datetime) -> Spent:
    """What ``records`` (not written yet) add to today's tokens and this month's cost."""
    tokens, cost = 0, Decimal(0)
    for r in records:
        if day_start(r.created_at) == day_start(now):
            tokens += r.input_tokens + r.output_tokens
        if month_start(r.created_at) == month_start(now):
            cost += Decimal(r.cost_usd)
    return Spent(tokens, cost)


COUNTER_COLUMNS = ("input_tokens", "output_tokens", "cached_input_tokens", "cost_usd", "calls")
# Every model call's record, written with its message: compiled once; its id is not read.
_RECORDS = CompiledInsert(UsageRecord, ids=False)


def record_usage(records: list[UsageRecord]) -> None:
    """Write the records and add them to their users' day and month counters: one INSERT of
    the records and one upsert of the counters, whatever their number. Call inside the
    transaction that writes the calls' messages (``Checkpointer.flush``). The records are
    left without their ids (nothing reads them)."""
    if not records:
        return
    _RECORDS.insert(records)
    sums: dict[tuple[int, str, date], list[Any]] = {}
    for r in records:
        for period, start in (
            (UsageCounter.Period.DAY, day_start(r.created_at)),
            (UsageCounter.Period.MONTH, month_start(r.created_at)),
        ):
            row = sums.setdefault((r.user_id, period.value, start), [0, 0, 0, Decimal(0), 0])
            row[0] += r.input_tokens
            row[1] += r.output_tokens
            row[2] += r.cached_input_tokens
            row[3] += Decimal(r.cost_usd)
            row[4] += 1
    bump_counters(sums)


def bump_counters(sums: dict[tuple[int, str, date], list[Any]]) -> None:
    """``INSERT … ON CONFLICT DO UPDATE SET c = c + EXCLUDED.c``: additive and race-free (two
    runs of one user writing at once both count), on PostgreSQL and SQLite alike."""
    table = UsageCounter._meta.db_table
    columns = ", ".join(COUNTER_COLUMNS)
    updates = ", ".join(f"{c} = {table}.{c} + EXCLUDED.{c}" for c in COUNTER_COLUMNS)
    rows = sorted(sums.items())  # one order for every writer: no deadlock between two
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s)"] * len(rows))
    params: list[Any] = []
    for (user_id, period, start), (inp, out, cached, cost, calls) in rows:
        params += [user_id, period, start, inp, out, cached, cost, calls]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (user_id, period, start, {columns}) VALUES {values}"
            f" ON CONFLICT (user_id, period, start) DO UPDATE SET {updates}",
            params,
        )
