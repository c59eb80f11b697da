"""``/ws/sessions/{id}/``: one group per session. Access is checked when the socket connects
and again every ``WS_AUTH_RECHECK_SECONDS`` while it stays open (``socket_watch``: all the
sockets of a process at once): a socket outlives the credentials it was opened with (a
deactivated or deleted user, a deleted token, a logged-out session, a changed password, a
deleted conversation), and must stop receiving events then.

The recheck is a poll, not a reaction to signals (docs/style.md "Inside an app": no logic in
signals; users and tokens also change through the admin and the ORM, where no service of ours
runs)."""

from __future__ import annotations

import json
import re
from importlib import import_module
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from autobahn.exception import Disconnected
from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from api.guards import json_too_deep
from core import metrics
from realtime import events

from .models import Session
from .socket_watch import Credentials, watch_for_this_loop

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser

CLOSE_FORBIDDEN = 4403
# What a session id and a token key can be: anything else is refused before it reaches a
# query or a group name (a NUL is a database error, a ``/`` or non-ASCII a channel-layer one).
SESSION_ID = re.compile(r"ses_[0-9a-f]{1,64}")
TOKEN_KEY = re.compile(r"[0-9A-Za-z]{1,64}")


@database_sync_to_async
def _token_may_see(key: str, session_id: str) -> bool:
    """The token exists, its user is active and owns the session: one query over primary
    keys (token key, session id) and the owner's row."""
    return Session.objects.filter(
        id=session_id, owner__auth_token__key=key, owner__is_active=True
    ).exists()


@database_sync_to_async
def _may_see(user: AbstractBaseUser, session_id: str) -> bool:
    return Session.objects.filter(id=session_id, owner_id=user.pk).exists()


async def _cookie_user(session_key: str | None) -> AbstractBaseUser | AnonymousUser | None:
    """The user of the Django session ``session_key`` now, resolved as Channels'
    ``AuthMiddleware`` resolves it (session row, user row, session auth hash), from a fresh
    store each time: at connect and at every recheck."""
    if not session_key:
        return None
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=session_key)
    return await get_user({"session": store})


class SessionConsumer(AsyncJsonWebsocketConsumer):
    group: str | None = None
    session_id: str = ""
    token: str | None = None
    session_key: str | None = None

    async def connect(self) -> None:
        # Any other path under /ws/ comes here too (config/routing.py), without an id: it is
        # refused as a session the user may not see, never a routing error (a 500).
        self.session_id = self.scope["url_route"]["kwargs"].get("session_id", "")
        query = parse_qs(self.scope.get("query_string", b"").decode(errors="replace"))
        if query.get("token"):
            self.token = query["token"][0]
        else:
            self.session_key = self.scope.get("cookies", {}).get(settings.SESSION_COOKIE_NAME)
        # Accept, then close with 4403: a close before accept reaches the client as a bare
        # HTTP 403 without the code.
        await self.accept()
        well_formed = SESSION_ID.fullmatch(self.session_id) and (
            self.token is None or TOKEN_KEY.fullmatch(self.token)
        )
        if not well_formed or not await self._allowed():
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.group = events.group_name(self.session_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.send_json({"type": "subscribed", "session_id": self.session_id})
        watch_for_this_loop().watch(
            self,
            Credentials(self.session_id, token=self.token, session_key=self.session_key),
        )

    async def _allowed(self) -> bool:
        """Whether the socket's credentials reach the session now: its token's, else its
        session cookie's user (resolved here, at connect and at each recheck)."""
        if self.token is not None:
            return await _token_may_see(self.token, self.session_id)
        user = await _cookie_user(self.session_key)
        if user is None or not user.is_authenticated:
            return False
        return await _may_see(user, self.session_id)

    async def revoke(self) -> None:
        """The socket's credentials no longer reach the session (the watch found it)."""
        # Leave the group first: nothing more is sent between the close and the disconnect.
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            self.group = None
        await self.close(code=CLOSE_FORBIDDEN)

    async def disconnect(self, code: int) -> None:
        watch_for_this_loop().forget(self)
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            self.group = None

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # Binary frames mean nothing here; the parent class would raise on them and end the
        # socket with an error.
        if text_data:
            await self.receive_json(await self.decode_json(text_data))

    @classmethod
    async def decode_json(cls, text_data: str) -> Any:
        """None for frames that are not JSON, or nest too deep to decode safely."""
        if json_too_deep(text_data):
            return None
        try:
            return json.loads(text_data)
        except ValueError:
            return None

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def dispatch(self, message: dict) -> None:
        if message.get("type") == "session.event":
            # The hot path, a frame per few tokens per listener: no database here, so not
            # Channels' ``aclose_old_connections()`` either — a thread hop for every message,
            # the largest single cost of Daphne's streaming.
            await self.session_event(message)
            return
        await super().dispatch(message)

    async def send(
        self, text_data: str | None = None, bytes_data: bytes | None = None, close: bool = False
    ) -> None:
        """A frame for a client that has just gone is dropped. Its close is on its way to this
        consumer, but an event can come first, and Daphne's websocket raises for a send on a
        closed connection (channels#1820): the consumer then ended on the error (logged with
        its traceback, one per such frame) without its ``disconnect``, so its group kept it
        and the socket watch held it for good."""
        try:
            await super().send(text_data=text_data, bytes_data=bytes_data, close=close)
        except Disconnected:
            return

    async def send_json(self, content: Any, close: bool = False) -> None:
        # Through ``send`` above (the parent's goes around it).
        await self.send(text_data=await self.encode_json(content), close=close)

    async def session_event(self, message: dict) -> None:
        # Pre-encoded once per session for every listener: sent as it is, straight to the
        # server (``send`` above, without its two layers of the parent's).
        try:
            await self.base_send({"type": "websocket.send", "text": message["text"]})
        except Disconnected:
            return
        metrics.observe_fanout(message.get("at"))
