"""The usage and quota reads of a user, with what only this app and ``sessions_app`` can
count: runs in progress, sessions held, session titles (``quotas_app.selectors`` does the
rest)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings

from quotas_app.selectors import quota_status, usage_report
from sessions_app.models import Session

from .selectors import active_runs


def usage_of(user: Any, *, start: datetime, end: datetime, group_by: str) -> dict[str, Any]:
    def titles(ids: list[str]) -> dict[str, str]:
        return dict(Session.objects.filter(owner_id=user.pk, id__in=ids).values_list("id", "title"))

    report = usage_report(
        user_id=user.pk,
        start=start,
        end=end,
        group_by=group_by,
        max_rows=settings.USAGE_API_MAX_ROWS,
        titles=titles,
    )
    return {"user": {"id": user.pk, "username": user.get_username()}, **report}


def quota_of(user: Any) -> dict[str, Any]:
    status = quota_status(
        user_id=user.pk,
        active_runs=active_runs(user.pk),
        sessions=Session.objects.filter(owner_id=user.pk).count(),
    )
    return {"user": {"id": user.pk, "username": user.get_username()}, **status}
