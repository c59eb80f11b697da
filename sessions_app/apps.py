from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured

from core import models_catalog

from . import permissions


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Agent sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A deployment whose tool rules or model list cannot be read does not start: read
        # wrong, the rules would fail open (every tool allowed) or every request would fail.
        try:
            permissions.defaults()
            models_catalog.catalogue()
        except ValueError as exc:
            raise ImproperlyConfigured(str(exc)) from exc
