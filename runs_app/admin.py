from __future__ import annotations

from django.contrib import admin

from sessions_app.admin import OwnedAdmin

from .models import Run


@admin.register(Run)
class RunAdmin(OwnedAdmin):
    owner_path = "session__owner"
    list_display = ("id", "session", "mode", "status", "created_at", "finished_at")
    list_filter = ("status", "mode")
    search_fields = ("id", "session__id")
    list_select_related = ("session",)
