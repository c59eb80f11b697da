"""``manage.py adduser NAME --password PW [--staff] [--superuser]``: add (or update) a user."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Add a user who can log in (or set an existing user's password and flags)."

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("username")
        parser.add_argument("--password", required=True)
        parser.add_argument("--staff", action="store_true", help="may use the admin")
        parser.add_argument("--superuser", action="store_true", help="sees every session")
        parser.add_argument("--skip-validation", action="store_true", help="accept a weak password")

    def handle(self, *args, **options) -> None:  # noqa: ANN002, ANN003
        User = get_user_model()
        username, password = options["username"].strip(), options["password"]
        if not username:
            raise CommandError("The username must not be empty.")
        user = User.objects.filter(username=username).first() or User(username=username)
        if not options["skip_validation"]:
            # The same validators as every other way to set a password (AUTH_PASSWORD_VALIDATORS).
            try:
                validate_password(password, user)
            except ValidationError as exc:
                reasons = " ".join(exc.messages)
                raise CommandError(f"The password is refused: {reasons}") from exc
        user.set_password(password)
        user.is_staff = options["staff"] or options["superuser"] or user.is_staff
        user.is_superuser = options["superuser"] or user.is_superuser
        user.save()
        self.stdout.write(f"user {username} ready")
