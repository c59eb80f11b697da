"""Coalesced writes of a run: new rows and changed fields, written together at a checkpoint.

A checkpoint writes only what changed since the last one (new messages and parts as bulk
INSERTs, changed fields as UPDATEs of those rows), never the history before it.
"""

from __future__ import annotations

from collections import defaultdict

from django.db import transaction
from django.utils import timezone

from sessions_app.models import Message, Part, Session


class Checkpointer:
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._new_messages: list[Message] = []
        self._new_parts: list[Part] = []
        self._new_ids: set[str] = set()
        self._dirty: dict[object, set[str]] = defaultdict(set)
        self._head: str | None = None
        self.writes = 0

    def add(self, obj: Message | Part) -> None:
        self._new_ids.add(obj.pk)
        (self._new_messages if isinstance(obj, Message) else self._new_parts).append(obj)

    def touch(self, obj: Message | Part, *fields: str) -> None:
        if obj.pk not in self._new_ids:
            self._dirty[obj].update(fields)

    def set_head(self, message_id: str) -> None:
        self._head = message_id

    @property
    def pending(self) -> bool:
        return bool(self._new_messages or self._new_parts or self._dirty or self._head)

    def flush(self) -> None:
        if not self.pending:
            return
        new_messages, new_parts = self._new_messages, self._new_parts
        dirty, head = self._dirty, self._head
        with transaction.atomic():
            if new_messages:
                Message.objects.bulk_create(new_messages)
            if new_parts:
                Part.objects.bulk_create(new_parts)
            for obj, fields in dirty.items():
                type(obj).objects.filter(pk=obj.pk).update(**{f: getattr(obj, f) for f in fields})
            if head:
                Session.objects.filter(id=self.session_id).update(
                    head_id=head, updated_at=timezone.now()
                )
        self._new_messages, self._new_parts = [], []
        self._new_ids = set()
        self._dirty = defaultdict(set)
        self._head = None
        self.writes += 1
