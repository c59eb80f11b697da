"""Read-mostly admin. Staff who are not superusers see only their own sessions."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, Exists, OuterRef
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from core.errors import AppError

from . import host_admin, host_calls, permissions  # noqa: F401 - host_admin registers the hosts' admin
from .models import HistoryEvent, Message, Part, Session, Share
from .selectors import active_path
from .services import revert_plan, sharing
from .services import sessions as session_services

# The revert action's mode choice (docs/semantics.md §14.5): value, label.
REWIND_MODES = [
    ("both", "Conversation and files"),
    ("conversation", "Conversation only (the files stay)"),
    ("files", "Files only (the conversation stays)"),
]


def link_to(view: str, pk: str | None, label: str | None = None) -> str:
    """A link to an admin change page by its url name (no query for the object)."""
    if not pk:
        return "–"
    return format_html('<a href="{}">{}</a>', reverse(view, args=[pk]), label or pk)


def admin_link(obj, label: str | None = None) -> str:  # noqa: ANN001
    """A link to ``obj``'s admin page (or a dash)."""
    if obj is None:
        return "–"
    meta = obj._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, label or obj.pk)


class RevertFilter(admin.SimpleListFilter):
    title = "revert"
    parameter_name = "revert"

    def lookups(self, request, model_admin):  # noqa: ANN001, ANN201
        return [("pending", "pending"), ("none", "none")]

    def queryset(self, request, queryset):  # noqa: ANN001, ANN201
        if self.value() == "pending":
            return queryset.filter(revert__isnull=False)
        if self.value() == "none":
            return queryset.filter(revert__isnull=True)
        return queryset


class SharedFilter(admin.SimpleListFilter):
    title = "share link"
    parameter_name = "shared"

    def lookups(self, request, model_admin):  # noqa: ANN001, ANN201
        return [("yes", "shared"), ("no", "not shared")]

    def queryset(self, request, queryset):  # noqa: ANN001, ANN201
        if self.value() in ("yes", "no"):
            return queryset.filter(is_shared=self.value() == "yes")
        return queryset


class ForkFilter(admin.SimpleListFilter):
    title = "lineage"
    parameter_name = "forked"

    def lookups(self, request, model_admin):  # noqa: ANN001, ANN201
        return [("yes", "forks"), ("no", "originals")]

    def queryset(self, request, queryset):  # noqa: ANN001, ANN201
        if self.value() in ("yes", "no"):
            return queryset.filter(forked_from_session__isnull=self.value() == "no")
        return queryset


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


class SessionForm(forms.ModelForm):
    class Meta:
        model = Session
        fields = ("title", "permissions")
        help_texts = {
            "permissions": 'Tool rules: {"write": "ask", "shell": {"git *": "allow", "**": "ask"}}'
            " (allow, ask or deny; patterns on the path or command)."
        }

    def clean_permissions(self) -> dict:
        try:
            return permissions.validate(self.cleaned_data.get("permissions"))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc


@admin.register(Session)
class SessionAdmin(OwnedAdmin):
    form = SessionForm
    # Few, narrow columns, so that the list fits beside the filters at 1280 px: the title,
    # id and lineage share a column, a pending revert shows under the status, and the model
    # is a filter (and on the change page).
    list_display = ("session", "owner", "state", "message_count", "shared", "created")
    list_display_links = None  # the session column links to the change page itself
    list_filter = ("status", RevertFilter, SharedFilter, ForkFilter, "model", "host")
    search_fields = ("id", "title", "owner__username")
    list_select_related = ("owner",)
    # A related session renders as its str() (with its title): shown by ``forked_from``.
    exclude = ("forked_from_session",)
    inlines = [MessageInline]
    actions = [
        "revert_action",
        "unrevert_action",
        "cleanup_action",
        "rollback_action",
        "revoke_share_action",
    ]

    def get_queryset(self, request: HttpRequest):  # noqa: ANN201
        live = Share.objects.filter(session=OuterRef("pk"), revoked_at__isnull=True)
        return (
            super()
            .get_queryset(request)
            .annotate(n_messages=Count("messages", distinct=True), is_shared=Exists(live))
        )

    @admin.display(description="session", ordering="id")
    def session(self, obj: Session) -> str:
        url = reverse("admin:sessions_app_session_change", args=[obj.pk])
        lineage = (
            format_html(
                '<span class="session-note">fork of {}</span>',
                self.forked_from(obj),
            )
            if obj.forked_from_session_id
            else ""
        )
        return format_html(
            '<a href="{}">{}</a><span class="session-id">{}</span>{}',
            url,
            obj.title or "(untitled)",
            obj.pk,
            lineage,
        )

    @admin.display(description="status", ordering="status")
    def state(self, obj: Session) -> str:
        if not obj.revert:
            return obj.get_status_display()
        return format_html(
            '{}<span class="session-note">revert pending</span>', obj.get_status_display()
        )

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Session) -> str:
        return timezone.localtime(obj.created_at).strftime("%Y-%m-%d %H:%M")

    @admin.display(description="messages", ordering="n_messages")
    def message_count(self, obj: Session) -> int:
        return obj.n_messages

    @admin.display(boolean=True, description="shared", ordering="is_shared")
    def shared(self, obj: Session) -> bool:
        return obj.is_shared

    @admin.action(description="Revoke the share link", permissions=["change"])
    def revoke_share_action(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001
        revoked = sum(sharing.revoke_share(session=session) for session in queryset)
        self.message_user(request, f"Revoked {revoked} share link(s).")

    @admin.display(description="forked from")
    def forked_from(self, obj: Session) -> str:
        # The id only, as the API shows it: a fork of another user's shared session must
        # not show that session's (current) title.
        return link_to("admin:sessions_app_session_change", obj.forked_from_session_id)

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
                    host_calls.call(
                        "rollback", session=session, num_turns=num_turns, user=request.user
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

    @admin.display(description="changes")
    def changes(self, obj: Session) -> str:
        """The stored ``summary``: the totals of the chat's Changes panel."""
        summary = obj.summary or {}
        files = summary.get("files", 0)
        return (
            f"{files} file{'' if files == 1 else 's'},"
            f" +{summary.get('additions', 0)} −{summary.get('deletions', 0)}"
        )

    @admin.action(description="Revert to a message or part…", permissions=["change"])
    def revert_action(self, request: HttpRequest, queryset) -> HttpResponse | None:  # noqa: ANN001
        if queryset.count() != 1:
            self.message_user(request, "Pick exactly one session to revert.", messages.WARNING)
            return None
        session = queryset.get()
        path = active_path(session)
        choice = request.POST.get("boundary", "")
        message_id, _, part_id = choice.partition(":")
        mode = request.POST.get("mode", "both")
        mode = mode if mode in revert_plan.MODES else "both"
        plan = None
        if choice and "apply" in request.POST:
            try:
                host_calls.call(
                    "revert",
                    session=session,
                    message_id=message_id,
                    part_id=part_id or None,
                    mode=mode,
                    user=request.user,
                )
            except AppError as exc:
                self.message_user(request, exc.message, messages.ERROR)
                return None
            done = {
                "both": "files restored",
                "conversation": "conversation only, the files are as they were",
                "files": "files only, the conversation is as it was",
            }[mode]
            self.message_user(request, f"Reverted {session.id}; {done}.")
            return None
        if choice:
            try:
                plan = host_calls.call_json(
                    "revert_plan",
                    session=session,
                    message_id=message_id,
                    part_id=part_id or None,
                    mode=mode,
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
                "mode": mode,
                "modes": REWIND_MODES,
                "plan": plan,
                "opts": self.model._meta,
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            },
        )

    @admin.action(
        description="Unrevert (restore the files from before the revert)", permissions=["change"]
    )
    def unrevert_action(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001
        self._each(request, queryset, "unrevert", "Unreverted")

    @admin.action(
        description="Confirm the revert (clean up what lies after it)", permissions=["change"]
    )
    def cleanup_action(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001
        self._each(request, queryset, "cleanup", "Cleaned up")

    def _each(self, request: HttpRequest, queryset, service, verb: str) -> None:  # noqa: ANN001
        """``service(session=…, user=…)`` on each session; a str names a host call (done on
        the session's home host when this process holds no worktree: ``host_calls``)."""
        done = 0
        for session in queryset:
            try:
                if isinstance(service, str):
                    host_calls.call(service, session=session, user=request.user)
                else:
                    service(session=session, user=request.user)  # noqa: B023
                done += 1
            except AppError as exc:
                self.message_user(request, f"{session.id}: {exc.message}", messages.ERROR)
        if done:
            self.message_user(request, f"{verb} {done} session(s).")

    def get_readonly_fields(self, request: HttpRequest, obj=None):  # noqa: ANN001, ANN201
        editable = ("title", "permissions")
        fields = [f.name for f in self.model._meta.fields if f.name not in editable]
        shown = {"forked_from_session": "forked_from", "summary": "changes"}
        return [shown.get(f, f) for f in fields]

    def save_model(self, request: HttpRequest, obj: Session, form, change: bool) -> None:  # noqa: ANN001
        """Only what the form edits is written (the service's UPDATE), never the whole row
        read when the page opened: a run may have moved the head or the lock since."""
        session_services.update_session(
            session=obj,
            title=form.cleaned_data.get("title") if "title" in form.changed_data else None,
            permissions=(
                form.cleaned_data.get("permissions") if "permissions" in form.changed_data else None
            ),
        )


@admin.register(Message)
class MessageAdmin(OwnedAdmin):
    owner_path = "session__owner"
    list_display = ("id", "session", "role", "parent_link", "run_link", "hidden", "created_at")

    @admin.display(description="parent")
    def parent_link(self, obj: Message) -> str:
        return link_to("admin:sessions_app_message_change", obj.parent_id)

    @admin.display(description="run")
    def run_link(self, obj: Message) -> str:
        return link_to("admin:runs_app_run_change", obj.run_id)

    list_filter = ("role", "hidden")
    search_fields = ("id", "session__id", "run_id")
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
