from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create (or reset) the demo user and print its login."

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("--username", default="demo")
        parser.add_argument("--password", default="demo-password")

    def handle(self, *args, username: str, password: str, **options) -> None:  # noqa: ANN002, ANN003
        User = get_user_model()
        user, _ = User.objects.get_or_create(username=username)
        if not user.check_password(password):
            # The same password again would be a new hash: a password change, which revokes
            # the user's API tokens (accounts.rotate_api_tokens) at every ./dev serve.
            user.set_password(password)
        user.is_staff = True
        user.is_superuser = True
        user.save()
        self.stdout.write(f"login: {username} / {password}")
