"""Read-mostly admin. Staff who are not superusers see only their own sessions."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from .models import HistoryEvent, Message, Part, Session, Share


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
    list_display = ("id", "title", "owner", "status", "model", "created_at")
    list_filter = ("status", "model")
    search_fields = ("id", "title")
    inlines = [MessageInline]

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
