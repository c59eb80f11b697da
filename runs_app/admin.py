from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from core.errors import AppError
from sessions_app.admin import OwnedAdmin, SessionAdmin, admin_link
from sessions_app.models import Session

from .models import Run
from .selectors import required_action
from .services.fork import fork_session
from .services.runs import abort_session, start_run


class WaitingFilter(admin.SimpleListFilter):
    title = "waiting for approval"
    parameter_name = "waiting"

    def lookups(self, request: HttpRequest, model_admin):  # noqa: ANN001, ANN201
        return [("yes", "Waiting for the owner's approval")]

    def queryset(self, request: HttpRequest, queryset):  # noqa: ANN001, ANN201
        if self.value() == "yes":
            return queryset.filter(status=Run.Status.REQUIRES_ACTION)
        return queryset


@admin.register(Run)
class RunAdmin(OwnedAdmin):
    owner_path = "session__owner"
    list_display = (
        "id",
        "session",
        "mode",
        "status",
        "waiting_on",
        "lineage",
        "created_at",
        "finished_at",
    )
    list_filter = (WaitingFilter, "status", "mode")
    search_fields = ("id", "session__id", "forked_from_run__id")
    list_select_related = ("session",)
    # Related sessions and users render as their str() (a title, a username): the lineage
    # column and ``started_by`` show what the owner may see instead.
    exclude = ("forked_from_session", "created_by")

    @admin.display(description="lineage")
    def lineage(self, obj: Run) -> str:
        """Where the run came from: the run it forked (and the K), the session it was copied
        from, the run that replaced it."""
        bits = []
        if obj.forked_from_run_id:
            source = Run(id=obj.forked_from_run_id)
            bits.append(
                format_html(
                    "forked from {} at K={}", admin_link(source), obj.forked_from_message_index
                )
            )
        if obj.forked_from_session_id:
            origin = Session(id=obj.forked_from_session_id)
            bits.append(format_html("copied from session {}", admin_link(origin)))
        if obj.replaced_by:
            bits.append(format_html("replaced by {}", admin_link(Run(id=obj.replaced_by))))
        # Each bit is already escaped by format_html.
        return mark_safe("<br>".join(bits)) if bits else "–"  # noqa: S308

    @admin.display(description="waiting on")
    def waiting_on(self, obj: Run) -> str:
        """The tool calls a waiting run asks its owner to decide (the chat decides them)."""
        action = required_action(obj)
        if not action:
            return "–"
        return ", ".join(call["tool"] for call in action["tool_calls"]) or "–"

    @admin.display(description="started by")
    def started_by(self, obj: Run) -> str:
        """Who started the run, when it is the session's owner (a run copied from another
        user's session by a fork names nobody: what the API shows a non-owner)."""
        if obj.created_by_id is None or obj.created_by_id != obj.session.owner_id:
            return "–"
        return obj.created_by.get_username() if obj.created_by else "–"

    def get_readonly_fields(self, request: HttpRequest, obj=None):  # noqa: ANN001, ANN201
        fields = [f for f in super().get_readonly_fields(request, obj) if f not in self.exclude]
        return [*fields, "lineage", "started_by"]


admin.site.unregister(Session)


@admin.register(Session)
class SessionWithRunsAdmin(SessionAdmin):
    """The session admin plus the moves that need a run: resume and abort."""

    actions = [*SessionAdmin.actions, "fork_action", "resume_action", "abort_action"]

    @admin.action(description="Fork into my account (chat and files)", permissions=["view"])
    def fork_action(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001
        for session in queryset:
            try:
                fork = fork_session(source=session, user=request.user, kind="admin")
            except AppError as exc:
                self.message_user(request, f"{session.id}: {exc.message}", messages.ERROR)
                continue
            self.message_user(
                request,
                format_html("Forked {} into {}.", session.id, admin_link(fork, fork.title)),
            )

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
