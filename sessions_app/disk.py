"""The admin's Disk page (issue 43): what the worktrees hold, as users see it and on the disk.
A fork shares its source's files by hard link (``workspace/linked_fork``), so the bytes the
worktrees show (their files' sizes, what the limits count) and the bytes they take (each file
once, whatever its names) differ; this page says both, per user and overall, and how worktrees
are written on this host. Superusers only: it walks every worktree (links never followed), on
demand."""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from core import mode
from workspace import shared_checkouts
from workspace.sandbox import workspaces
from workspace.worktree_usage import walk

from .models import Session


@dataclass
class Holding:
    """One user's (or everyone's) worktrees: files, the bytes they show, the bytes on disk
    (each inode once), and the sessions."""

    sessions: int = 0
    files: int = 0
    shown: int = 0
    disk: int = 0
    kept: int = 0  # of ``disk``: what only the checkouts clones share hold
    inodes: set[tuple[int, int]] = field(default_factory=set, repr=False)

    def add(self, info: os.stat_result, *, file: bool) -> None:
        """An entry of a worktree: a regular file counts as a file it shows; every entry
        (its directories too, which no fork can share) counts on disk, each inode once."""
        if file:
            self.files += 1
            self.shown += info.st_size
        key = (info.st_dev, info.st_ino)
        if key not in self.inodes:
            self.inodes.add(key)
            self.disk += info.st_blocks * 512

    @property
    def figures(self) -> dict[str, str]:
        """As the page shows them: counts with separators, sizes in MiB."""
        return {
            "files": f"{self.files:,}",
            "shown": _mib(self.shown),
            "disk": _mib(self.disk),
            "kept": _mib(self.kept),
        }


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


def holdings() -> tuple[Holding, list[tuple[str, Holding]]]:
    """Everyone's worktrees, and each user's (largest on disk first). ``overall`` also holds
    the checkouts clones share (``shared_checkouts``): what only they keep on disk."""
    overall = Holding()
    users: dict[str, Holding] = defaultdict(Holding)
    owners = dict(Session.objects.values_list("id", "owner__username"))
    root = Path(settings.WORKSPACE_ROOT)
    for session_id, owner in owners.items():
        mine = users[owner]
        mine.sessions += 1
        overall.sessions += 1
        for info, file in _entries(root / session_id):
            mine.add(info, file=file)
            overall.add(info, file=file)
    kept = Holding()
    kept.inodes = overall.inodes  # what a worktree holds is counted there
    for info, _ in _entries(shared_checkouts.root()):
        kept.add(info, file=False)
    overall.kept = kept.disk
    overall.disk += kept.disk
    return overall, sorted(users.items(), key=lambda item: -item[1].disk)


def _entries(worktree: Path):  # noqa: ANN202 - an iterator of (os.stat_result, bool)
    """The stat of the worktree's directory and of each entry beneath it
    (``worktree_usage.walk``: links never followed), and whether it is a regular file."""
    try:
        yield os.stat(worktree, follow_symlinks=False), False
    except OSError:
        return
    for _, entry in walk(worktree):
        try:
            yield entry.stat(follow_symlinks=False), entry.is_file(follow_symlinks=False)
        except OSError:
            continue


def disk_page(request: HttpRequest) -> HttpResponse:
    if not request.user.is_superuser:
        raise PermissionDenied
    if not mode.holds_worktrees():
        # A web of several worker hosts (issue 45): the worktrees are on the hosts, each
        # host's disk on the Hosts page; nothing here to walk.
        context = {**admin.site.each_context(request), "title": "Disk", "no_worktrees": True}
        return TemplateResponse(request, "admin/sessions_app/disk.html", context)
    overall, users = holdings()
    context = {
        **admin.site.each_context(request),
        "title": "Disk",
        "overall": overall,
        "users": users,
        "workspaces": workspaces(Path(settings.WORKSPACE_ROOT)),
        "root": settings.WORKSPACE_ROOT,
    }
    return TemplateResponse(request, "admin/sessions_app/disk.html", context)
