"""Every open socket's access, rechecked for all the sockets of a process at once.

A socket outlives the credentials it was opened with (a deactivated or deleted user, a
deleted token, a logged-out session, a changed password, a deleted conversation), so each is
rechecked every ``WS_AUTH_RECHECK_SECONDS``. One watch per event loop does it for all of them:
token sockets in one query, cookie sockets by their Django session (as Channels'
``AuthMiddleware`` resolved them at connect), ownership in one more — in one thread that keeps
its database connection. A recheck per socket, each on a fresh connection, took a third of
Daphne's time with 200 listeners.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import import_module
from types import SimpleNamespace
from typing import Any, Protocol

from django.conf import settings
from django.contrib import auth
from django.db import DatabaseError, connection

from .models import Session

log = logging.getLogger(__name__)
DEFAULT_RECHECK_SECONDS = 5.0
MIN_RECHECK_SECONDS = 0.1


class Revocable(Protocol):
    async def revoke(self) -> None: ...


@dataclass(frozen=True)
class Credentials:
    session_id: str
    token: str | None = None
    session_key: str | None = None


def still_allowed(items: list[Credentials]) -> list[bool]:
    """For each socket: do its credentials still reach its conversation? (Blocks.)"""
    try:
        return _still_allowed(items)
    except DatabaseError:
        connection.close()  # a broken connection is opened again next time
        raise


def _still_allowed(items: list[Credentials]) -> list[bool]:
    tokens = [i for i in items if i.token is not None]
    valid_tokens: set[tuple[str, str]] = set()
    if tokens:
        valid_tokens = set(
            Session.objects.filter(
                id__in={i.session_id for i in tokens},
                owner__auth_token__key__in={i.token for i in tokens},
                owner__is_active=True,
            ).values_list("owner__auth_token__key", "id")
        )
    users: dict[str, Any] = {}
    store = import_module(settings.SESSION_ENGINE).SessionStore
    for item in items:
        if item.token is None and item.session_key and item.session_key not in users:
            request = SimpleNamespace(session=store(session_key=item.session_key))
            users[item.session_key] = auth.get_user(request)
    cookie_sessions = {i.session_id for i in items if i.token is None}
    owners = dict(
        Session.objects.filter(id__in=cookie_sessions).values_list("id", "owner_id")
        if cookie_sessions
        else []
    )
    answers = []
    for item in items:
        if item.token is not None:
            answers.append((item.token, item.session_id) in valid_tokens)
            continue
        user = users.get(item.session_key or "")
        answers.append(
            user is not None and user.is_authenticated and owners.get(item.session_id) == user.pk
        )
    return answers


class SocketWatch:
    """The sockets of one event loop, and the task that rechecks them all."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.sockets: dict[Revocable, Credentials] = {}
        self.task: asyncio.Task | None = None
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="socket-watch")

    def watch(self, socket: Revocable, credentials: Credentials) -> None:
        self.sockets[socket] = credentials
        if self.task is None or self.task.done():
            self.task = self.loop.create_task(self._recheck_forever())

    def forget(self, socket: Revocable) -> None:
        self.sockets.pop(socket, None)

    async def _recheck_forever(self) -> None:
        """Runs while there are sockets to watch."""
        while self.sockets:
            interval = float(getattr(settings, "WS_AUTH_RECHECK_SECONDS", 0) or 0)
            # 0 (or less) must not turn into a loop of queries; it is not "off".
            await asyncio.sleep(max(interval or DEFAULT_RECHECK_SECONDS, MIN_RECHECK_SECONDS))
            watched = list(self.sockets.items())
            if not watched:
                break
            try:
                answers = await self.loop.run_in_executor(
                    self.thread, still_allowed, [c for _, c in watched]
                )
            except Exception:
                # The database is away: keep the sockets rather than close every socket of the
                # site at once; the first recheck that reaches the database decides.
                log.warning("websocket access recheck failed", exc_info=True)
                continue
            for (socket, _), allowed in zip(watched, answers, strict=True):
                if not allowed and socket in self.sockets:
                    self.forget(socket)
                    await socket.revoke()


_watches: dict[asyncio.AbstractEventLoop, SocketWatch] = {}


def watch_for_this_loop() -> SocketWatch:
    loop = asyncio.get_running_loop()
    watch = _watches.get(loop)
    if watch is None:
        for stale in [lp for lp in _watches if lp.is_closed()]:
            _watches.pop(stale).thread.shutdown(wait=False)
        watch = _watches[loop] = SocketWatch(loop)
    return watch
