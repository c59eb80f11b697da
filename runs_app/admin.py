from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from sessions_app.admin import OwnedAdmin, SessionAdmin
from sessions_app.models import Session

from .models import Run
from .services.runs import abort_session, start_run


@admin.register(Run)
class RunAdmin(OwnedAdmin):
    owner_path = "session__owner"
    list_display = ("id", "session", "mode", "status", "created_at", "finished_at")
    list_filter = ("status", "mode")
    search_fields = ("id", "session__id")
    list_select_related = ("session",)


admin.site.unregister(Session)


@admin.register(Session)
class SessionWithRunsAdmin(SessionAdmin):
    """The session admin plus the moves that need a run: resume and abort."""

    actions = [*SessionAdmin.actions, "resume_action", "abort_action"]

    @admin.action(description="Resume the unfinished turn", permissions=["change"])
    def resume_action(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001
        self._each(
            request,
            queryset,
            lambda session, user: start_run(session=session, user=user, mode="resume"),
            "Resumed",
        )

    @admin.action(description="Abort the running run", permissions=["change"])
    def abort_action(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001
        self._each(
            request, queryset, lambda session, user: abort_session(session=session), "Aborted"
        )
