"""The worker hosts in the admin (issue 45, step 1): each host's name, whether it is live,
its last heartbeat, the sessions it is home to (a link to them in the sessions' list) and
the disk of its ``WORKSPACE_ROOT`` as its last beat measured it. Read only: a host writes
its own row (``hosts.beat``); superusers only, as it is the deployment's, no user's.

Two actions: *Drain* (what ``manage.py drain_host`` does: no new session is placed there,
its idle sessions move to the live host with the fewest; sessions_app/rehome.py) and *Take
sessions again* (the host is placed on again; nothing moves back)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from . import hosts, rehome
from .models import Host


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "live",
        "draining",
        "last_heartbeat",
        "sessions",
        "disk",
        "version",
        "pid",
    )
    list_filter = ("draining",)
    readonly_fields = [f.name for f in Host._meta.fields]
    actions = ("drain", "undrain")

    def get_queryset(self, request: HttpRequest):  # noqa: ANN201
        return hosts.with_session_counts(super().get_queryset(request))

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return request.user.is_superuser

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return False

    @admin.action(description="Drain: place no session there, move its idle sessions away")
    def drain(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001 - a QuerySet
        for name in queryset.values_list("name", flat=True):
            done = rehome.drain(name)
            level = messages.WARNING if done.busy or done.stranded else messages.SUCCESS
            self.message_user(
                request,
                f"{name} is draining: {len(done.moved)} moved, {len(done.busy)} busy (they "
                f"stay until their run ends: drain again), {len(done.stranded)} without a live "
                "host to go to.",
                level,
            )

    @admin.action(description="Take sessions again (stop draining)")
    def undrain(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001 - a QuerySet
        n = queryset.update(draining=False)
        self.message_user(request, f"{n} host(s) take new sessions again.", messages.SUCCESS)

    @admin.display(boolean=True, description="live")
    def live(self, obj: Host) -> bool:
        return obj.last_heartbeat >= hosts.live_since()

    @admin.display(description="sessions", ordering="n_sessions")
    def sessions(self, obj: Host) -> str:
        url = reverse("admin:sessions_app_session_changelist")
        return format_html(
            '<a href="{}?{}">{}</a>', url, urlencode({"host": obj.name}), obj.n_sessions
        )

    @admin.display(description="disk free")
    def disk(self, obj: Host) -> str:
        if not obj.disk_total:
            return "-"
        return f"{_size(obj.disk_free)} of {_size(obj.disk_total)}"
