"""The admin's Usage dashboard (issue 18): tokens and cost per day by model or by user
(server-side SVG), by user and by model, the costliest sessions, runs that ended in error,
live runs and runs waiting for an approval, and a CSV export of the model calls.

Staff only (``admin_view`` in ``config/urls.py``); a staff user who is not a superuser sees
only their own usage, sessions and runs, as the admin's session list does. Every list is
bounded and each is one query (``quotas_app/dashboard.py`` reads the usage rows; this module
adds what only the session and run tables hold)."""

from __future__ import annotations

import csv
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from asgiref.sync import sync_to_async
from django import forms
from django.contrib import admin
from django.contrib.auth.models import Group
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from quotas_app import charts
from quotas_app import dashboard as usage
from sessions_app.models import Session

from .branch_usage import inherited_of
from .models import Run

LIMIT = 20  # rows of each list
DEFAULT_DAYS = 30


def tokens(value: Any) -> str:
    return f"{int(value or 0):,}"


def dollars(value: Any) -> str:
    return f"${Decimal(value or 0):,.4f}"


# -- the filter -----------------------------------------------------------------------------
class UsageFilter(forms.Form):
    """``?from=&to=`` (UTC dates, both inclusive), ``group`` (a Django group's id) and
    ``stack`` (the daily charts' series: model or user)."""

    stack = forms.ChoiceField(
        choices=[("model", "by model"), ("user", "by user")], required=False, label="stack"
    )

    def __init__(self, data: Any, *, groups: QuerySet[Group]) -> None:
        super().__init__(data)
        date_input = forms.DateInput(attrs={"type": "date"})
        # ``from`` is a Python keyword: the fields are added by name.
        self.fields = {
            "from": forms.DateField(required=False, label="from", widget=date_input),
            "to": forms.DateField(required=False, label="to", widget=date_input),
            "group": forms.ModelChoiceField(
                groups, required=False, empty_label="all groups", label="group"
            ),
            **self.fields,
        }

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        start, end = usage.date_range(data, DEFAULT_DAYS)
        return {**data, "from": start, "to": end, "stack": data.get("stack") or "model"}


@dataclass(frozen=True)
class Window:
    start: date
    end: date  # inclusive
    group: Group | None = None
    stack: str = "model"

    @property
    def since(self) -> datetime:
        return datetime.combine(self.start, time(), tzinfo=UTC)

    @property
    def until(self) -> datetime:
        return datetime.combine(self.end + timedelta(days=1), time(), tzinfo=UTC)


def read_filter(request: HttpRequest) -> tuple[UsageFilter, Window]:
    """The form (bound, with its errors) and the window it asks for: the default one (the
    last 30 days, every group) while it is not valid."""
    groups = Group.objects.order_by("name")
    if not request.user.is_superuser:
        groups = groups.filter(user=request.user)
    form = UsageFilter(request.GET, groups=groups)
    if form.is_valid():
        data = form.cleaned_data
        form.data = form.data.copy()  # the form shows the dates counted, defaults too
        form.data["from"], form.data["to"] = data["from"].isoformat(), data["to"].isoformat()
        return form, Window(data["from"], data["to"], data["group"], data["stack"])
    end = usage.today()
    return form, Window(end - timedelta(days=DEFAULT_DAYS - 1), end)


def owner_scope(request: HttpRequest) -> int | None:
    """Whose usage and runs the requester sees: everyone's (None) for a superuser, else
    their own."""
    return None if request.user.is_superuser else request.user.pk


def calls_for(request: HttpRequest, window: Window) -> QuerySet:
    return usage.usage_in(
        start=window.since,
        end=window.until,
        user_id=owner_scope(request),
        group_id=window.group.pk if window.group else None,
    )


# -- the page -------------------------------------------------------------------------------
def usage_dashboard(request: HttpRequest) -> HttpResponse:
    form, window = read_filter(request)
    calls = calls_for(request, window)
    by_model = usage.by_key(calls, "model", LIMIT)
    by_user = usage.by_key(calls, "user", LIMIT)
    stacked = by_model if window.stack == "model" else by_user
    top = [row["name"] for row in stacked[: usage.SERIES_MAX]]
    days = usage.daily(calls, start=window.start, end=window.end, key=window.stack, top=top)
    context = {
        **admin.site.each_context(request),
        "title": "Usage",
        "form": form,
        "window": window,
        "totals": formatted(usage.totals(calls)),
        "charts": daily_charts(days, window.stack),
        "by_model": table(by_model),
        "by_user": table(by_user, link_users=request.user.has_perm("auth.change_user")),
        "sessions": top_sessions(calls),
        **run_lists(request, window),
        "csv_query": request.GET.urlencode(),
        "edit_users": request.user.has_perm("auth.change_user"),
        "edit_groups": request.user.has_perm("auth.change_group"),
        "limit": LIMIT,
    }
    return TemplateResponse(request, "admin/quotas_app/dashboard.html", context)


def formatted(row: dict[str, Any]) -> dict[str, Any]:
    """A row of sums with its numbers as the page shows them (``*_text``)."""
    return {
        **row,
        **{
            f"{name}_text": tokens(row.get(name))
            for name in ("calls", "input_tokens", "output_tokens", "tokens")
        },
        "cost_text": dollars(row.get("cost_usd")),
    }


def table(rows: list[dict[str, Any]], *, link_users: bool = False) -> list[dict[str, Any]]:
    """Rows by model or user with their bars' lengths, and a user's quota page."""
    most_tokens = max((row["tokens"] for row in rows), default=0)
    most_cost = max((row["cost_usd"] for row in rows), default=0)
    shown = []
    for row in rows:
        line = formatted(row)
        line["tokens_bar"] = charts.share(row["tokens"], most_tokens)
        line["cost_bar"] = charts.share(row["cost_usd"], most_cost)
        if link_users and "user_id" in row:
            line["url"] = reverse("admin:auth_user_change", args=[row["user_id"]])
        shown.append(line)
    return shown


def daily_charts(days: usage.Daily, stack: str) -> list[charts.Chart]:
    by = "model" if stack == "model" else "user"
    return [
        charts.stacked_days(
            title=f"Tokens per day by {by}",
            days=days.days,
            series=days.series,
            values=days.tokens,
            fmt=tokens,
            others=usage.OTHERS,
        ),
        charts.stacked_days(
            title=f"Cost per day by {by} (USD)",
            days=days.days,
            series=days.series,
            values=days.cost,
            fmt=dollars,
            axis_prefix="$",
            others=usage.OTHERS,
        ),
    ]


def top_sessions(calls: QuerySet) -> list[dict[str, Any]]:
    """The costliest sessions of the range with their titles (one query for them all; a
    deleted session keeps its spending, without a link). Their own calls (the ledger's: a
    fork's copied history is never a row there) and, apart, what a fork's history cost in
    the session it came from (docs/semantics.md §14.6: shown, never added to a total; one query)."""
    rows = usage.top_sessions(calls, LIMIT)
    ids = [row["session_id"] for row in rows]
    titles = dict(Session.objects.filter(id__in=ids).values_list("id", "title"))
    inherited = inherited_of(ids)
    shown = []
    for row in rows:
        line = formatted(row)
        sid = row["session_id"]
        if sid in inherited:
            spent = inherited[sid]
            line["inherited_text"] = (
                f"{dollars(spent['cost_usd'])} · {tokens(spent['calls'])} calls · "
                f"{tokens(spent['input_tokens'] + spent['output_tokens'])} tokens"
            )
        line["exists"] = sid in titles
        line["title"] = titles.get(sid) or ("(untitled)" if sid in titles else "(deleted)")
        line["url"] = reverse("admin:sessions_app_session_change", args=[sid])
        shown.append(line)
    return shown


def run_lists(request: HttpRequest, window: Window) -> dict[str, Any]:
    """Runs that ended in error in the range (newest first), live runs (pending, running)
    and runs waiting for an approval: at most ``LIMIT`` of each, ``…_more`` when there are
    more (the run list, filtered alike, has them all)."""
    runs = Run.objects.select_related("session__owner").only(
        "id",
        "mode",
        "status",
        "error",
        "created_at",
        "finished_at",
        "session__id",
        "session__title",
        "session__owner__username",
    )
    owner = owner_scope(request)
    if owner is not None:
        runs = runs.filter(session__owner_id=owner)
    if window.group is not None:
        runs = runs.filter(session__owner__groups=window.group)
    lists = {
        "errors": runs.filter(
            status=Run.Status.ERROR,
            finished_at__gte=window.since,
            finished_at__lt=window.until,
        ).order_by("-finished_at", "-id"),
        "live": runs.filter(status__in=(Run.Status.PENDING, Run.Status.RUNNING)).order_by(
            "-created_at", "-id"
        ),
        "waiting": runs.filter(status=Run.Status.REQUIRES_ACTION).order_by("-created_at", "-id"),
    }
    found: dict[str, Any] = {}
    for name, query in lists.items():
        rows = list(query[: LIMIT + 1])
        found[f"{name}_more"] = len(rows) > LIMIT
        found[name] = [run_row(run) for run in rows[:LIMIT]]
    changelist = reverse("admin:runs_app_run_changelist")
    found["errors_url"] = f"{changelist}?status__exact=error"
    found["live_url"] = f"{changelist}?status__exact=running"
    found["waiting_url"] = f"{changelist}?waiting=yes"
    return found


def run_row(run: Run) -> dict[str, Any]:
    error = run.error if isinstance(run.error, dict) else {}
    message = str(error.get("message") or "")
    return {
        "id": run.id,
        "url": reverse("admin:runs_app_run_change", args=[run.id]),
        "session_url": reverse("admin:sessions_app_session_change", args=[run.session.id]),
        "session_title": run.session.title or "(untitled)",
        "owner": run.session.owner.get_username(),
        "mode": run.mode,
        "status": run.get_status_display(),
        "error": f"{error.get('type', '')}: {message[:160]}" if error else "",
        "created_at": run.created_at,
        "finished_at": run.finished_at,
    }


# -- the export -----------------------------------------------------------------------------
CSV_CHUNK = 2000  # rows read per query


class Echo:
    """A file-like that hands back what ``csv.writer`` writes."""

    def write(self, value: str) -> str:
        return value


def usage_csv(request: HttpRequest) -> HttpResponse:
    """The model calls of the page's range and group, one row each (the same scope as the
    page: a staff user who is not a superuser gets only their own), streamed."""
    form, window = read_filter(request)
    if not form.is_valid():
        return HttpResponse(form.errors.as_text(), status=400, content_type="text/plain")
    response = StreamingHttpResponse(
        csv_lines(calls_for(request, window)), content_type="text/csv; charset=utf-8"
    )
    name = f"usage-{window.start:%Y%m%d}-{window.end:%Y%m%d}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


async def csv_lines(calls: QuerySet) -> AsyncIterator[str]:
    """The CSV, a chunk of rows at a time: an async iterator, which the ASGI server sends as
    it comes (it would read a sync one whole into memory first)."""
    writer = csv.writer(Echo())
    yield writer.writerow(usage.CSV_COLUMNS)
    after = None
    while True:
        rows, after = await sync_to_async(usage.csv_chunk)(calls, after=after, size=CSV_CHUNK)
        if not rows:
            return
        yield "".join(writer.writerow(row) for row in rows)
