"""``manage.py prune_snapshots [--days N] [--dry-run]``: delete the objects of the shared
snapshot store (``WORKSPACE_ROOT/.snapshots/objects``) that no snapshot needs any more.

Kept: every tree a row names (parts, a pending revert, shares, history events), each session
git dir's last tree and index, everything those reach, and every object younger than N days.
Deleted: the other loose objects. Run it from cron (daily or weekly), never during a backup
(docs/operations.md, "Operator's tasks")."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sessions_app.services.prune import prune_snapshots
from workspace.snapshots import SnapshotError


class Command(BaseCommand):
    help = "Delete snapshot objects that no row or session needs, older than N days."

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument(
            "--days",
            type=float,
            default=14,
            help="keep every object written in the last N days (default 14; at least 1)",
        )
        parser.add_argument("--dry-run", action="store_true", help="count them, delete nothing")

    def handle(self, *args, **options) -> None:  # noqa: ANN002, ANN003
        days, dry_run = options["days"], options["dry_run"]
        if days < 1:
            # Younger objects may belong to a step or a revert whose row is not written yet.
            raise CommandError("--days must be at least 1.")
        try:
            result = prune_snapshots(days=days, dry_run=dry_run)
        except SnapshotError as exc:
            raise CommandError(f"Nothing was deleted: {exc}") from exc
        verb = "would free" if dry_run else "freed"
        self.stdout.write(
            f"{result.named} snapshot object(s) named ({result.missing} not in the store), "
            f"{result.reachable} reachable object(s) kept, {result.young} younger than "
            f"{days:g} day(s) kept"
        )
        self.stdout.write(
            f"{result.pruned} unreachable object(s) {verb}: {result.pruned_bytes} bytes"
            + (f"; {result.temp_files} stale temporary file(s)" if result.temp_files else "")
            + (" (--dry-run: nothing deleted)" if dry_run else "")
        )
