"""The admin's side of adding people: on the user list a filter "waiting" (signed up, never
approved) and an action "Approve"; and the invitations, whose link is shown once, when made.

The user admin is the one registered before this app's (quotas_app's, with its quota
inline), extended here and registered again; this app comes after ``quotas_app`` in
``INSTALLED_APPS``."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse

from . import services
from .models import Invitation


class WaitingFilter(admin.SimpleListFilter):
    title = "sign-up"
    parameter_name = "signup"

    def lookups(self, request, model_admin):  # noqa: ANN001, ANN201
        return [("waiting", "waiting")]

    def queryset(self, request, queryset):  # noqa: ANN001, ANN201
        if self.value() == "waiting":
            return queryset.filter(pk__in=services.waiting_users().values("pk"))
        return queryset


@admin.action(description="Approve the selected sign-ups (activate them)", permissions=["change"])
def approve(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    count = services.approve(queryset, by=request.user)
    modeladmin.message_user(
        request,
        f"{count} account(s) approved; they can log in now."
        if count
        else "None of the selected accounts was waiting for approval.",
        messages.SUCCESS if count else messages.WARNING,
    )


User = get_user_model()
RegisteredUserAdmin = type(admin.site.get_model_admin(User))


class SignUpUserAdmin(RegisteredUserAdmin):
    list_filter = (*RegisteredUserAdmin.list_filter, WaitingFilter)
    actions = (*(RegisteredUserAdmin.actions or ()), approve)


admin.site.unregister(User)
admin.site.register(User, SignUpUserAdmin)


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    """Add one (a note for whom, if you like): its single-use link is shown once, on save."""

    list_display = ("__str__", "state", "created_by", "created_at", "expires_at", "used_by")
    fields = ("note",)
    readonly_fields = ("created_by", "created_at", "expires_at", "used_at", "used_by")

    def get_fields(self, request, obj=None):  # noqa: ANN001, ANN201
        return ("note",) if obj is None else ("note", *self.readonly_fields)

    def save_model(self, request, obj, form, change):  # noqa: ANN001, ANN201
        if change:
            obj.save(update_fields=["note"])
            return
        made, token = services.new_invitation(by=request.user, note=obj.note)
        obj.pk, obj.token_hash, obj.expires_at = made.pk, made.token_hash, made.expires_at
        link = request.build_absolute_uri(reverse("invitation", args=[token]))
        messages.warning(
            request,
            f"The invitation link (copy it now: it is not shown again; it makes one account "
            f"and expires {made.expires_at:%Y-%m-%d %H:%M} UTC): {link}",
        )
