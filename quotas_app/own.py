"""A user's own Usage page (``/usage/``, issue 46): their tokens, cost and runs per UTC day
over a range, and each of their limits with how much of it is used. The reads are
``selectors.usage_report`` (by day) and ``selectors.quota_status``, which the usage API
answers too; this module shapes them for the page (the charts of ``charts.py``, the quota
bars). The runs per day are counted by the caller (``runs_app/usage_page.py``): this app
knows no run table."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django import forms

from . import charts
from .dashboard import date_range, today

DEFAULT_DAYS = 30  # as the admin's dashboard
TOKEN_SERIES = ("input", "output")
RUNS = "runs"
COST = "cost"
LABELS = {
    "runs_per_minute": "Runs per minute",
    "tokens_per_day": "Tokens today (UTC)",
    "cost_per_month": "Cost this month (UTC)",
    "concurrent_runs": "Runs in progress",
    "sessions": "Sessions",
    "worktree_bytes": "Files of one session",
}
NEAR = 80  # percent of a limit from which its bar warns


def tokens(value: Any) -> str:
    return f"{int(value or 0):,}"


def dollars(value: Any) -> str:
    return f"${Decimal(value or 0):,.4f}"


def size(value: Any) -> str:
    """``1.5 GB``, ``200 MB``, ``12 kB``, ``800 bytes``."""
    number = int(value or 0)
    for unit, suffix in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if number >= unit:
            return f"{number / unit:.3g} {suffix}"
    return f"{number:,} bytes"


# -- the range ------------------------------------------------------------------------------
class RangeForm(forms.Form):
    """``?from=&to=``: UTC dates, both included; the last 30 days by default."""

    def __init__(self, data: Any) -> None:
        super().__init__(data)
        date_input = forms.DateInput(attrs={"type": "date"})
        # ``from`` is a Python keyword: the fields are added by name.
        self.fields = {
            "from": forms.DateField(required=False, label="From", widget=date_input),
            "to": forms.DateField(required=False, label="To", widget=date_input),
        }

    def clean(self) -> dict[str, Any]:
        start, end = date_range(super().clean(), DEFAULT_DAYS, "From / To")
        return {"from": start, "to": end}


@dataclass(frozen=True)
class Window:
    start: date
    end: date  # inclusive

    @property
    def since(self) -> datetime:
        return datetime.combine(self.start, time(), tzinfo=UTC)

    @property
    def until(self) -> datetime:
        return datetime.combine(self.end + timedelta(days=1), time(), tzinfo=UTC)

    @property
    def days(self) -> list[date]:
        return [self.start + timedelta(days=i) for i in range((self.end - self.start).days + 1)]


def read_range(query: Any) -> tuple[RangeForm, Window]:
    """The form (bound, with its errors) and its window; the default one while it is not
    valid. The form shows the dates counted, the defaults too."""
    form = RangeForm(query)
    if form.is_valid():
        start, end = form.cleaned_data["from"], form.cleaned_data["to"]
        form.data = form.data.copy()
        form.data["from"], form.data["to"] = start.isoformat(), end.isoformat()
        return form, Window(start, end)
    end = today()
    return form, Window(end - timedelta(days=DEFAULT_DAYS - 1), end)


# -- the days -------------------------------------------------------------------------------
def day_rows(
    window: Window, by_day: list[dict[str, Any]], runs: dict[date, int]
) -> list[dict[str, Any]]:
    """One row per day of the window that had a call or a run, newest first, with its
    numbers as shown (``*_text``)."""
    found = {row["day"]: row for row in by_day}
    rows = []
    for day in reversed(window.days):
        row = found.get(day)
        if row is None and not runs.get(day):
            continue
        row = row or {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0}
        rows.append(
            {
                "day": day,
                "runs": runs.get(day, 0),
                "calls": row["calls"],
                "input_text": tokens(row["input_tokens"]),
                "output_text": tokens(row["output_tokens"]),
                "cost_text": dollars(row["cost_usd"]),
            }
        )
    return rows


NARROW = 360  # a phone's chart: its labels at about their size


def day_charts(
    window: Window, by_day: list[dict[str, Any]], runs: dict[date, int]
) -> list[dict[str, charts.Chart]]:
    """Tokens per day (input and output stacked), cost per day and runs per day, each wide
    (``charts.WIDTH``) and narrow (``NARROW``), for the style sheet to show one of them."""
    values: dict[str, dict[date, Any]] = {name: {} for name in (*TOKEN_SERIES, COST)}
    for row in by_day:
        values["input"][row["day"]] = row["input_tokens"]
        values["output"][row["day"]] = row["output_tokens"]
        values[COST][row["day"]] = Decimal(str(row["cost_usd"]))
    values[RUNS] = dict(runs)
    wide, narrow = _charts(window, values, charts.WIDTH), _charts(window, values, NARROW)
    return [{"wide": w, "narrow": n} for w, n in zip(wide, narrow, strict=True)]


def _charts(window: Window, values: dict[str, dict[date, Any]], width: int) -> list[charts.Chart]:
    days = window.days
    return [
        charts.stacked_days(
            title="Tokens per day",
            days=days,
            series=list(TOKEN_SERIES),
            values=values,
            fmt=tokens,
            width=width,
        ),
        charts.stacked_days(
            title="Cost per day (USD)",
            days=days,
            series=[COST],
            values=values,
            fmt=dollars,
            axis_prefix="$",
            width=width,
        ),
        replace(
            charts.stacked_days(
                title="Runs per day",
                days=days,
                series=[RUNS],
                values=values,
                fmt=tokens,
                width=width,
                whole=True,
            ),
            note="No run started in this range.",
        ),
    ]


def shown_totals(totals: dict[str, Any], runs: dict[date, int]) -> dict[str, Any]:
    return {
        **totals,
        "runs": sum(runs.values()),
        "runs_text": tokens(sum(runs.values())),
        **{
            f"{name}_text": tokens(totals[name])
            for name in ("calls", "input_tokens", "output_tokens", "tokens")
        },
        "cost_text": dollars(totals["cost_usd"]),
    }


# -- the quotas -----------------------------------------------------------------------------
def amount(name: str, value: Any) -> str:
    if name == "cost_per_month":
        return dollars(value)
    if name == "worktree_bytes":
        return size(value)
    return tokens(value)


def quota_lines(status: dict[str, Any]) -> list[dict[str, Any]]:
    """Each limit of ``selectors.quota_status`` as the page shows it: what is used of what
    limit (a bar, in percent, when both are known), where the limit comes from, when it
    resets."""
    lines = []
    for name, line in status["quotas"].items():
        limit, used = line["limit"], line["used"]
        percent = None
        if limit and used is not None:
            percent = min(round(float(used) / float(limit) * 100, 1), 100.0)
        source = line["source"]
        lines.append(
            {
                "name": name,
                "label": LABELS[name],
                "limited": limit is not None,
                "limit_text": amount(name, limit) if limit is not None else "unlimited",
                "used_text": amount(name, used) if used is not None else "",
                "percent": percent,
                "state": "over" if percent == 100 else "near" if (percent or 0) >= NEAR else "",
                "source": "your own" if source == "user" else source.replace("group:", "group "),
                "resets_at": line["resets_at"] if limit is not None else None,
            }
        )
    return lines
