from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "sessions_app.accounts"
    label = "accounts"
    verbose_name = "Accounts: sign-ups and invitations"
    default_auto_field = "django.db.models.BigAutoField"
