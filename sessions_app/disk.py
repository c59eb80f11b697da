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
    inodes: set[tuple[int, int]] = field(default_factory=set, repr=False)

    def add(self, info: os.stat_result) -> None:
        self.files += 1
        self.shown += info.st_size
        key = (info.st_dev, info.st_ino)
        if key not in self.inodes:
            self.inodes.add(key)
            self.disk += info.st_blocks * 512


def holdings() -> tuple[Holding, list[tuple[str, Holding]]]:
    """Everyone's worktrees, and each user's (largest on disk first)."""
    overall = Holding()
    users: dict[str, Holding] = defaultdict(Holding)
    owners = dict(Session.objects.values_list("id", "owner__username"))
    root = Path(settings.WORKSPACE_ROOT)
    for session_id, owner in owners.items():
        mine = users[owner]
        mine.sessions += 1
        overall.sessions += 1
        for info in _files(root / session_id):
            mine.add(info)
            overall.add(info)
    return overall, sorted(users.items(), key=lambda item: -item[1].disk)


def _files(worktree: Path):  # noqa: ANN202 - an iterator of os.stat_result
    """The stat of each regular file beneath ``worktree`` (``worktree_usage.walk``: links
    never followed)."""
    for _, entry in walk(worktree):
        try:
            if entry.is_file(follow_symlinks=False):
                yield entry.stat(follow_symlinks=False)
        except OSError:
            continue


def disk_page(request: HttpRequest) -> HttpResponse:
    if not request.user.is_superuser:
        raise PermissionDenied
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
