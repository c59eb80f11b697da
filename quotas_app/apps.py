from django.apps import AppConfig


class QuotasAppConfig(AppConfig):
    name = "quotas_app"
    verbose_name = "Quotas and usage"
    default_auto_field = "django.db.models.BigAutoField"
