"""Read-mostly admin. Staff who are not superusers see only their own sessions."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from .errors import AppError
from .models import HistoryEvent, Message, Part, Session, Share
from .selectors import active_path
from .services import fork as fork_services
from .services import revert as revert_services
from .services import rollback as rollback_services


def admin_link(obj, label: str | None = None) -> str:  # noqa: ANN001
    """A link to ``obj``'s admin page (or a dash)."""
    if obj is None:
        return "–"
    meta = obj._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, label or obj.pk)


class OwnedAdmin(admin.ModelAdmin):
    owner_path = "owner"

    def get_queryset(self, request: HttpRequest):  # noqa: ANN201
        qs = super().get_queryset(request)
        if request.user.is_superuser:
            return qs
        return qs.filter(**{self.owner_path: request.user})

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj=None):  # noqa: ANN001, ANN201
        return [f.name for f in self.model._meta.fields]


class PartInline(admin.TabularInline):
    model = Part
    fk_name = "message"
    extra = 0
    can_delete = False
    fields = ("id", "order", "type", "tool", "text", "state")
    readonly_fields = fields
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return False


class MessageInline(admin.TabularInline):
    model = Message
    fk_name = "session"
    extra = 0
    can_delete = False
    fields = ("id", "role", "parent", "run_id", "created_at", "completed_at")
    readonly_fields = fields
    show_change_link = True
    max_num = 0

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return False


@admin.register(Session)
class SessionAdmin(OwnedAdmin):
    list_display = (
        "id",
        "title",
        "owner",
        "status",
        "reverted",
        "forked_from",
        "model",
        "created_at",
    )
    list_filter = ("status", "model")
    search_fields = ("id", "title")
    list_select_related = ("owner", "forked_from_session")
    inlines = [MessageInline]
    actions = [
        "revert_action",
        "unrevert_action",
        "cleanup_action",
        "rollback_action",
        "fork_action",
    ]

    @admin.display(description="forked from")
    def forked_from(self, obj: Session) -> str:
        return admin_link(obj.forked_from_session)

    @admin.action(description="Roll back N user turns…", permissions=["change"])
    def rollback_action(self, request: HttpRequest, queryset) -> HttpResponse | None:  # noqa: ANN001
        raw = request.POST.get("num_turns", "")
        if "apply" in request.POST:
            try:
                num_turns = int(raw)
            except ValueError:
                num_turns = 0
            done = 0
            for session in queryset:
                try:
                    rollback_services.rollback_session(
                        session=session, num_turns=num_turns, user=request.user
                    )
                    done += 1
                except AppError as exc:
                    self.message_user(request, f"{session.id}: {exc.message}", messages.ERROR)
            if done:
                self.message_user(request, f"Rolled back {num_turns} turn(s) in {done} session(s).")
            return None
        return TemplateResponse(
            request,
            "admin/sessions_app/rollback.html",
            {
                **self.admin_site.each_context(request),
                "title": "Roll back user turns",
                "sessions": list(queryset),
                "opts": self.model._meta,
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            },
        )

    @admin.action(description="Fork into my account (chat and files)", permissions=["view"])
    def fork_action(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001
        for session in queryset:
            try:
                fork = fork_services.fork_session(source=session, user=request.user)
            except AppError as exc:
                self.message_user(request, f"{session.id}: {exc.message}", messages.ERROR)
                continue
            self.message_user(
                request,
                format_html("Forked {} into {}.", session.id, admin_link(fork, fork.title)),
            )

    @admin.display(boolean=True, description="revert pending")
    def reverted(self, obj: Session) -> bool:
        return bool(obj.revert)

    @admin.action(description="Revert to a message or part…", permissions=["change"])
    def revert_action(self, request: HttpRequest, queryset) -> HttpResponse | None:  # noqa: ANN001
        if queryset.count() != 1:
            self.message_user(request, "Pick exactly one session to revert.", messages.WARNING)
            return None
        session = queryset.get()
        path = active_path(session)
        choice = request.POST.get("boundary", "")
        message_id, _, part_id = choice.partition(":")
        plan = None
        if choice and "apply" in request.POST:
            try:
                revert_services.revert_session(
                    session=session,
                    message_id=message_id,
                    part_id=part_id or None,
                    user=request.user,
                )
            except AppError as exc:
                self.message_user(request, exc.message, messages.ERROR)
                return None
            self.message_user(request, f"Reverted {session.id}; files restored.")
            return None
        if choice:
            try:
                plan = revert_services.plan_revert(
                    session=session, message_id=message_id, part_id=part_id or None
                )
            except AppError as exc:
                self.message_user(request, exc.message, messages.ERROR)
        return TemplateResponse(
            request,
            "admin/sessions_app/revert.html",
            {
                **self.admin_site.each_context(request),
                "title": f"Revert {session}",
                "session": session,
                "path": path,
                "choice": choice,
                "plan": plan,
                "opts": self.model._meta,
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            },
        )

    @admin.action(
        description="Unrevert (restore the files from before the revert)", permissions=["change"]
    )
    def unrevert_action(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001
        self._each(request, queryset, revert_services.unrevert_session, "Unreverted")

    @admin.action(
        description="Confirm the revert (clean up what lies after it)", permissions=["change"]
    )
    def cleanup_action(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001
        self._each(request, queryset, revert_services.cleanup_session, "Cleaned up")

    def _each(self, request: HttpRequest, queryset, service, verb: str) -> None:  # noqa: ANN001
        done = 0
        for session in queryset:
            try:
                service(session=session, user=request.user)  # noqa: B023
                done += 1
            except AppError as exc:
                self.message_user(request, f"{session.id}: {exc.message}", messages.ERROR)
        if done:
            self.message_user(request, f"{verb} {done} session(s).")

    def get_readonly_fields(self, request: HttpRequest, obj=None):  # noqa: ANN001, ANN201
        return [f.name for f in self.model._meta.fields if f.name != "title"]


@admin.register(Message)
class MessageAdmin(OwnedAdmin):
    owner_path = "session__owner"
    list_display = ("id", "session", "role", "run_id", "created_at", "completed_at")
    list_filter = ("role",)
    search_fields = ("id", "session__id")
    inlines = [PartInline]
    list_select_related = ("session",)


@admin.register(Part)
class PartAdmin(OwnedAdmin):
    owner_path = "session__owner"
    list_display = ("id", "message", "type", "tool", "order")
    list_filter = ("type",)
    search_fields = ("id", "message__id")
    list_select_related = ("message",)


@admin.register(HistoryEvent)
class HistoryEventAdmin(OwnedAdmin):
    owner_path = "session__owner"
    list_display = ("id", "session", "kind", "run_id", "created_at")


@admin.register(Share)
class ShareAdmin(OwnedAdmin):
    owner_path = "session__owner"
    list_display = ("token", "session", "message", "created_at", "revoked_at")
