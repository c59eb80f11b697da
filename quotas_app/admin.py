"""Quota editing on the user and group pages: an inline of the user's (or group's) ``Quota``
on Django's own User and Group admins, re-registered here with it and nothing else changed."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User

from .models import Quota

FIELDS = (
    "runs_per_minute",
    "tokens_per_day",
    "cost_per_month",
    "concurrent_runs",
    "sessions",
    "worktree_bytes",
)


class QuotaInline(admin.StackedInline):
    model = Quota
    fields = FIELDS
    max_num = 1
    can_delete = True
    extra = 0


class UserQuotaInline(QuotaInline):
    fk_name = "user"
    verbose_name = verbose_name_plural = (
        "quota (this user's own limits; blank: their groups' or the deployment's)"
    )


class GroupQuotaInline(QuotaInline):
    fk_name = "group"
    verbose_name = verbose_name_plural = (
        "quota (a member gets the most generous of their groups'; blank: says nothing)"
    )


class QuotaUserAdmin(UserAdmin):
    inlines = (*UserAdmin.inlines, UserQuotaInline)


class QuotaGroupAdmin(GroupAdmin):
    inlines = (*GroupAdmin.inlines, GroupQuotaInline)


admin.site.unregister(User)
admin.site.register(User, QuotaUserAdmin)
admin.site.unregister(Group)
admin.site.register(Group, QuotaGroupAdmin)
