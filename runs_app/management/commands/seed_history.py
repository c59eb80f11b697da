"""``manage.py seed_history --user demo --runs 1000``: a session with N finished runs, to try
the UI and the history moves on a long conversation."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from runs_app.services.seed import seed_runs
from sessions_app.services.sessions import create_session


class Command(BaseCommand):
    help = "Create a session with N finished runs (user, tool call, answer) for the given user."

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("--user", required=True)
        parser.add_argument("--runs", type=int, default=100)
        parser.add_argument("--title", default="")

    def handle(self, *args, **options) -> None:  # noqa: ANN002, ANN003
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"No user {options['user']!r}.")
        if options["runs"] < 1:
            raise CommandError("--runs must be at least 1.")
        session = create_session(owner=user, title=options["title"] or f"{options['runs']} runs")
        seed_runs(session, options["runs"])
        self.stdout.write(f"{session.id}: {options['runs']} runs")
