"""``/usage/``: the signed-in user's own usage and quotas (issue 46), a page over the reads
the usage API answers (``quotas_app.selectors``, shaped by ``quotas_app.own``) and the one
count only this app can make, the runs started per day. Only the requester's own numbers:
the page takes no user parameter."""

from __future__ import annotations

from datetime import UTC, date

from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.db.models.functions import TruncDate
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from quotas_app import own
from quotas_app.selectors import usage_report

from .models import Run
from .usage import quota_of


def runs_per_day(user_id: int, window: own.Window) -> dict[date, int]:
    """The runs of the user's sessions started on each UTC day of the window: one query."""
    rows = (
        Run.objects.filter(
            session__owner_id=user_id, created_at__gte=window.since, created_at__lt=window.until
        )
        .annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("day")
        .annotate(runs=Count("id"))
        .order_by("day")
    )
    return {row["day"]: row["runs"] for row in rows}


@login_required
def usage_page(request: HttpRequest) -> HttpResponse:
    form, window = own.read_range(request.GET)
    user_id = request.user.pk
    report = usage_report(
        user_id=user_id,
        start=window.since,
        end=window.until,
        group_by="day",
        max_rows=len(window.days),
    )
    runs = runs_per_day(user_id, window)
    context = {
        "form": form,
        "window": window,
        "totals": own.shown_totals(report["totals"], runs),
        "charts": own.day_charts(window, report["rows"], runs),
        "days": own.day_rows(window, report["rows"], runs),
        "quotas": own.quota_lines(quota_of(request.user)),
    }
    return render(request, "app/usage.html", context)
