"""``manage.py recover_sessions [--dry-run]``: sessions whose busy lease expired belong to a
dead worker. Resume their run (enqueued again; it recovers the unfinished turn) or, when that
run had already finished, release the lock. The workers' sweep does the same every half
lease; this is for an operator (or cron) when no worker is running it."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.utils import timezone

from runs_app.execution.sweeper import requeue_expired
from runs_app.models import Run
from sessions_app.models import Session


class Command(BaseCommand):
    help = "Resume or release the sessions whose run lease expired."

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("--dry-run", action="store_true", help="list them, change nothing")

    def handle(self, *args, **options) -> None:  # noqa: ANN002, ANN003
        stale = list(
            Session.objects.filter(
                busy_run_id__isnull=False, lease_expires_at__lt=timezone.now()
            ).values_list("id", "busy_run_id")
        )
        for session_id, run_id in stale:
            run = Run.objects.filter(id=run_id).only("status").first()
            action = "resume" if run is not None and not run.is_terminal else "release"
            self.stdout.write(f"{session_id} {run_id} {action}")
        if options["dry_run"]:
            self.stdout.write(f"{len(stale)} stale session(s); nothing changed (--dry-run)")
            return
        resumed = requeue_expired()
        self.stdout.write(
            f"{len(stale)} stale session(s): {len(resumed)} run(s) resumed, "
            f"{len(stale) - len(resumed)} lock(s) released"
        )
