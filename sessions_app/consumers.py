"""``/ws/sessions/{id}/``: one group per session; access checked when the socket connects."""

from __future__ import annotations

import json
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from . import events
from .models import Session

CLOSE_FORBIDDEN = 4403


@database_sync_to_async
def _user_for_token(key: str):  # noqa: ANN202
    from rest_framework.authtoken.models import Token

    token = Token.objects.select_related("user").filter(key=key).first()
    return token.user if token and token.user.is_active else None


@database_sync_to_async
def _may_see(user, session_id: str) -> bool:  # noqa: ANN001
    return Session.objects.filter(id=session_id, owner_id=user.pk).exists()


class SessionConsumer(AsyncWebsocketConsumer):
    group: str | None = None

    async def connect(self) -> None:
        session_id = self.scope["url_route"]["kwargs"]["session_id"]
        user = self.scope.get("user")
        query = parse_qs(self.scope.get("query_string", b"").decode())
        if query.get("token"):
            user = await _user_for_token(query["token"][0])
        # Accept, then close with 4403: a close before accept reaches the client as a bare
        # HTTP 403 without the code.
        await self.accept()
        if user is None or not user.is_authenticated or not await _may_see(user, session_id):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.group = events.group_name(session_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.send(text_data=json.dumps({"type": "subscribed", "session_id": session_id}))

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if text_data and text_data.strip() == '{"type": "ping"}':
            await self.send(text_data='{"type": "pong"}')

    async def session_event(self, message: dict) -> None:
        await self.send(text_data=message["text"])
