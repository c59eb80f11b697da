"""The worker hosts in the admin (issue 45, step 1): each host's name, whether it is live,
its last heartbeat, the sessions it is home to (a link to them in the sessions' list) and
the disk of its ``WORKSPACE_ROOT`` as its last beat measured it. Read only: a host writes
its own row (``hosts.beat``); superusers only, as it is the deployment's, no user's."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from . import hosts
from .models import Host


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ("name", "live", "last_heartbeat", "sessions", "disk", "version", "pid")
    readonly_fields = [f.name for f in Host._meta.fields]

    def get_queryset(self, request: HttpRequest):  # noqa: ANN201
        return hosts.with_session_counts(super().get_queryset(request))

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return request.user.is_superuser

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return False

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
