"""What the quota check adds to a run request (issue 18).

A run request is ``start_run`` (the session row locked, the run admitted: saved, the busy
lock taken), timed in this process against PostgreSQL, each inside a transaction that is
rolled back so every sample sees the same rows. Three ways, side by side:

* **disabled**: ``quotas_app.services.admit_run`` replaced by a no-op (the floor);
* **no limits**: the check as deployed by default (every run limit unlimited): one query
  for the user's limits, no lock;
* **all run limits**: runs per minute, tokens per day, cost per month and concurrent runs
  set (high, so every request is admitted): the user row locked, the day and month
  counters read, the runs in progress counted, the minute's admissions read and one written.

Each with the user's history holding 1 and 1,000,000 usage rows (inserted server-side with
``generate_series``, spread over 60 days, with their day and month counters, then
ANALYZEd). The check reads counters, never the usage rows, so the two should not differ.
Also: ``GET /api/usage/``'s report over a day and over 30 days of that history (it sums
the rows on the (user, created_at) index: its cost grows with the range, by design).
"""

from __future__ import annotations

import statistics
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from unittest import mock

from .stats import percentile, ratio

SIZES = (1, 1_000_000)
DAYS = 60


class Rollback(Exception):
    pass


def _seed(user_id: int, session_id: str, rows: int) -> None:
    """``rows`` usage rows of ``user_id`` over the last ``DAYS`` days, and their counters."""
    from django.db import connection

    from quotas_app.models import UsageCounter, UsageRecord

    UsageRecord.objects.filter(user_id=user_id).delete()
    UsageCounter.objects.filter(user_id=user_id).delete()
    table = UsageRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (user_id, session_id, run_id, message_id, model,"
            " input_tokens, output_tokens, cached_input_tokens, cost_usd, created_at)"
            " SELECT %s, %s, 'run_bench', 'msg_' || g, 'scripted', 100, 20, 0, 0.0001,"
            f" now() - (g %% {DAYS * 24 * 60}) * interval '1 minute'"
            " FROM generate_series(1, %s) AS g",
            [user_id, session_id, rows],
        )
        for period, trunc in (("day", "day"), ("month", "month")):
            cursor.execute(
                f"INSERT INTO {UsageCounter._meta.db_table} (user_id, period, start,"
                " input_tokens, output_tokens, cached_input_tokens, cost_usd, calls)"
                f" SELECT user_id, %s, date_trunc('{trunc}', created_at AT TIME ZONE 'UTC')::date,"
                " sum(input_tokens), sum(output_tokens), sum(cached_input_tokens),"
                " sum(cost_usd), count(*)"
                f" FROM {table} WHERE user_id = %s GROUP BY 1, 3",
                [period, user_id],
            )
        cursor.execute(f"ANALYZE {table}")
        cursor.execute(f"ANALYZE {UsageCounter._meta.db_table}")


def _time_requests(session: Any, user: Any, samples: int) -> list[float]:
    from django.db import transaction

    from runs_app.services.runs import start_run

    times = []
    for i in range(samples + 10):
        started = time.perf_counter()
        try:
            with transaction.atomic():
                start_run(
                    session=session,
                    user=user,
                    messages=[{"role": "user", "content": "say hi"}],
                    defer_enqueue=True,
                )
                elapsed = (time.perf_counter() - started) * 1000.0
                raise Rollback
        except Rollback:
            pass
        if i >= 10:  # warm-up
            times.append(elapsed)
    return times


def _summary(times: list[float]) -> dict[str, float]:
    return {
        "p50_ms": percentile(times, 50),
        "p99_ms": percentile(times, 99),
        "mean_ms": statistics.fmean(times),
        "samples": len(times),
    }


def run(env: Any, *, quick: bool = False) -> dict[str, Any]:
    from django.contrib.auth.models import User

    from quotas_app.models import Quota
    from runs_app.usage import usage_of
    from sessions_app.services.sessions import create_session

    samples = 200 if quick else 1000
    user, _ = User.objects.get_or_create(username="quota-bench")
    session = create_session(owner=user, title="quota bench")
    out: dict[str, Any] = {"samples": samples, "sizes": {}}
    for rows in SIZES:
        started = time.perf_counter()
        _seed(user.pk, session.id, rows)
        seeded_s = time.perf_counter() - started
        result: dict[str, Any] = {"seed_s": seeded_s}
        Quota.objects.filter(user=user).delete()
        with ExitStack() as stack:
            stack.enter_context(mock.patch("quotas_app.services.admit_run", lambda **kw: None))
            result["disabled"] = _summary(_time_requests(session, user, samples))
        result["no_limits"] = _summary(_time_requests(session, user, samples))
        Quota.objects.create(
            user=user,
            runs_per_minute=10**9,
            tokens_per_day=10**15,
            cost_per_month=Decimal("99999999"),
            concurrent_runs=10**6,
        )
        result["all_limits"] = _summary(_time_requests(session, user, samples))
        Quota.objects.filter(user=user).delete()
        base = result["disabled"]
        for key in ("no_limits", "all_limits"):
            r = result[key]
            r["added_p50_ms"] = r["p50_ms"] - base["p50_ms"]
            r["added_p99_ms"] = r["p99_ms"] - base["p99_ms"]
            r["ratio_p50"] = ratio(r["p50_ms"], base["p50_ms"])
            r["ratio_p99"] = ratio(r["p99_ms"], base["p99_ms"])
        now = datetime.now(UTC)
        for label, days in (("report_1d_ms", 1), ("report_30d_ms", 30)):
            times = []
            for _ in range(3 if quick else 5):
                t0 = time.perf_counter()
                usage_of(user, start=now - timedelta(days=days), end=now, group_by="day")
                times.append((time.perf_counter() - t0) * 1000.0)
            result[label] = statistics.median(times)
        out["sizes"][str(rows)] = result
    return out


def report(r: dict[str, Any]) -> str:
    from .__main__ import _f, _table

    rows = []
    for size, res in r["sizes"].items():
        base = res["disabled"]
        rows.append(
            [
                f"{int(size):,} usage rows: check disabled",
                _f(base["p50_ms"], 2),
                _f(base["p99_ms"], 2),
                "-",
                "-",
                "-",
            ]
        )
        for key, label in (("no_limits", "no limits set"), ("all_limits", "all run limits set")):
            s = res[key]
            rows.append(
                [
                    f"{int(size):,} usage rows: {label}",
                    _f(s["p50_ms"], 2),
                    _f(s["p99_ms"], 2),
                    f"{s['added_p50_ms']:+.2f}",
                    f"{_f(s['ratio_p50'], 2)}x",
                    f"{_f(s['ratio_p99'], 2)}x",
                ]
            )
    one, many = r["sizes"].get("1"), r["sizes"].get("1000000")
    note = f"{r['samples']} requests each, each in a rolled-back transaction (start_run)."
    if one and many:
        grows = ratio(many["all_limits"]["p50_ms"], one["all_limits"]["p50_ms"])
        note += (
            f" All limits, 1M vs 1 row: p50 {_f(grows, 2)}x. GET /api/usage/ report"
            f" (1M rows): 1 day {_f(many['report_1d_ms'], 1)} ms, 30 days"
            f" {_f(many['report_30d_ms'], 1)} ms; seeding 1M rows {_f(many['seed_s'], 1)} s."
        )
    return _table(
        "Quota check: the cost it adds to a run request (PostgreSQL)",
        ["", "p50 ms", "p99 ms", "added p50 ms", "p50 / disabled", "p99 / disabled"],
        rows,
        note,
    )
