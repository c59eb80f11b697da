"""Web and worker never run as root (docs/semantics.md §11.3).

Worktree content is hostile: a confinement mistake anywhere (a git the server starts, a file
it opens, a sandbox escape) is bounded by what the server's own user may do. As root that is
everything on the machine. The shipped deployment runs both processes as the ``agentplat``
user (``platform/``); a services-mode process started as root refuses to start, saying so,
unless the operator says ``ALLOW_ROOT=true`` (a throwaway machine, CI). Embedded mode, a
developer's own ``./dev serve``, only warns.
"""

from __future__ import annotations

import logging
import os

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

log = logging.getLogger(__name__)

HELP = (
    "run it as an unprivileged user (the shipped units and image use `agentplat`), or set "
    "ALLOW_ROOT=true on a machine whose every user you trust"
)


def refuse_root(process: str, *, embedded: bool, euid: int | None = None) -> None:
    """ImproperlyConfigured when ``process`` (``web``, ``worker``) runs as root in services
    mode without ``ALLOW_ROOT``; a warning in ``embedded`` mode (runs_app.execution.runtime
    decides it, the caller asks)."""
    if (os.geteuid() if euid is None else euid) != 0:
        return
    if settings.ALLOW_ROOT:
        log.warning("the %s process runs as root (ALLOW_ROOT=true)", process)
        return
    if embedded:
        log.warning("the %s process runs as root: %s", process, HELP)
        return
    raise ImproperlyConfigured(f"The {process} process refuses to run as root: {HELP}.")
