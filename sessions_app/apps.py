from django.apps import AppConfig
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.db.models.signals import post_save, pre_save

from core import models_catalog

from . import permissions


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Agent sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A password change anywhere (the chat's page and API, the admin, changepassword)
        # rotates the user's API tokens: at the save that stores the new hash.
        from .services import accounts  # its models need the registry ready

        user_model = get_user_model()
        pre_save.connect(
            accounts.note_password_change,
            sender=user_model,
            dispatch_uid="sessions_app.password-change",
        )
        post_save.connect(
            accounts.rotate_api_tokens,
            sender=user_model,
            dispatch_uid="sessions_app.password-change",
        )
        # A deployment whose tool rules or model list cannot be read does not start: read
        # wrong, the rules would fail open (every tool allowed) or every request would fail.
        try:
            permissions.defaults()
            models_catalog.catalogue()
        except ValueError as exc:
            raise ImproperlyConfigured(str(exc)) from exc
