"""``manage.py drain_host NAME``: stop placing sessions on a host and move its idle ones to
the live host with the fewest sessions (sessions_app/rehome.py). Run it again until no busy
session is left, then stop the host."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sessions_app import rehome
from sessions_app.models import Host


class Command(BaseCommand):
    help = "Drain a worker host: no new sessions on it; its idle sessions move to live hosts."

    def add_arguments(self, parser) -> None:  # noqa: ANN001 - argparse's parser
        parser.add_argument("name")

    def handle(self, *args, **options) -> None:  # noqa: ANN002, ANN003 - Django's signature
        name = options["name"]
        if not Host.objects.filter(name=name).exists():
            raise CommandError(f"No host named {name!r}.")
        done = rehome.drain(name)
        for sid, target in done.moved:
            self.stdout.write(f"moved {sid} -> {target}")
        for sid in done.busy:
            self.stdout.write(f"busy {sid}: stays until its run ends; drain again")
        for sid in done.stranded:
            self.stdout.write(f"stays {sid}: no live host to move it to")
        self.stdout.write(
            f"{name} is draining: {len(done.moved)} moved, {len(done.busy)} busy, "
            f"{len(done.stranded)} without a live host."
        )
