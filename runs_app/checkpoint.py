"""Coalesced writes of a run: new rows and changed fields, written together at a checkpoint.

A checkpoint writes only what changed since the last one (new messages and parts as bulk
INSERTs, changed fields as UPDATEs of those rows), never the history before it.

**Fenced.** A checkpointer made for an execution (``run_id``, ``epoch``) writes only while
that execution owns its run (``fencing.fence`` in the same transaction): a stale worker's
checkpoint raises ``LeaseLost`` and writes nothing.

**Stored before shown.** The events that describe rows (a message, a part, its finished
tool call) are ``hold``-ed while those rows are only buffered, and published once the
checkpoint that writes them commits; a checkpoint refused (or never reached: the worker
died) publishes none of them. Only text and tool-output deltas, and a tool's ``running``
state, go out before their row (docs/api.md "Websocket events").
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Hashable
from datetime import datetime
from typing import Any

from django.db import connection, models, transaction
from django.utils import timezone

from api.guards import unstorable_text
from core.compiled import CompiledInsert, CompiledUpdate, update_of_shape
from quotas_app.models import UsageRecord
from quotas_app.services import record_usage
from realtime import events
from sessions_app.models import Message, Part, Session

from .execution.fencing import LeaseLost, fence, owned

# What every checkpoint writes (a run's start and end, each step): compiled once.
_SET_HEAD = CompiledUpdate(
    lambda id: Session.objects.filter(id=id), ("head_id", "updated_at"), id=str
)
_MESSAGES, _PARTS = CompiledInsert(Message), CompiledInsert(Part)
# The fields of a stored message or part that changed (a part's text and state, a message's
# end): an UPDATE for each model and set of fields, compiled at its first use.
_CHANGED: dict[Hashable, CompiledUpdate[Any]] = {}

# What PostgreSQL refuses in text and jsonb: NUL, and surrogates (alone, as Python strings
# hold them: a tool's bytes decoded with ``surrogateescape``, a model's ``"\\ud800"``).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _escape(text: str) -> str:
    return _UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def storable(value: Any) -> Any:
    """``value`` with every string the database cannot hold escaped, in place where it is a
    dict or list (what a run holds in memory is then what it stored): NUL becomes the six
    characters ``\\u0000``, a lone surrogate ``\\udXXX`` (docs/semantics.md §11.5). A tool's output,
    a file it read, a model's text or arguments: data, which must never crash the write that
    stores it — a crash there re-ran the step after every redelivery. The parser's walk
    finds nothing in nearly every value, and then nothing is copied or rebuilt."""
    if unstorable_text(value) is None:
        return value
    if isinstance(value, str):
        return _escape(value)
    stack = [value]
    while stack:  # iterative: a model's structured output may nest deeper than recursion goes
        item = stack.pop()
        if isinstance(item, dict):
            for key in list(item):
                inner = item[key]
                if isinstance(key, str) and _UNSTORABLE.search(key):
                    del item[key]
                    key = _escape(key)
                item[key] = _escape(inner) if isinstance(inner, str) else inner
                if isinstance(inner, (dict, list)):
                    stack.append(inner)
        elif isinstance(item, list):
            for index, inner in enumerate(item):
                if isinstance(inner, str):
                    item[index] = _escape(inner)
                elif isinstance(inner, (dict, list)):
                    stack.append(inner)
    return value


def _make_storable(obj: models.Model, fields: Any = None) -> None:
    """The text and JSON fields of ``obj`` (or only ``fields``), escaped where needed."""
    names = fields or [f.attname for f in obj._meta.concrete_fields]
    for name in names:
        current = getattr(obj, name, None)
        if isinstance(current, (str, dict, list)):
            setattr(obj, name, storable(current))


class Checkpointer:
    def __init__(
        self,
        session_id: str,
        *,
        run_id: str = "",
        epoch: int | None = None,
        lost: Callable[[], bool] | None = None,
    ) -> None:
        self.session_id = session_id
        # The execution whose writes these are: every flush is fenced by its epoch, and
        # refused as soon as ``lost()`` says its keeper stopped it (its lease not renewed:
        # nobody may have taken the run yet, but it writes nothing more either way).
        self.run_id, self.epoch, self.lost = run_id, epoch, lost
        self._held: list[tuple[str, dict[str, Any]]] = []
        self._new_messages: list[Message] = []
        self._new_parts: list[Part] = []
        self._new_ids: set[str] = set()
        self._dirty: dict[object, set[str]] = defaultdict(set)
        self._head: str | None = None
        # When the last flush wrote the head: the session's ``updated_at`` as stored.
        self.head_stamped: datetime | None = None
        # One usage row per model call, written with its message (its ``tokens``).
        self._usage: list[UsageRecord] = []
        self.writes = 0

    def add(self, obj: Message | Part) -> None:
        self._new_ids.add(obj.pk)
        (self._new_messages if isinstance(obj, Message) else self._new_parts).append(obj)

    def touch(self, obj: models.Model, *fields: str) -> None:
        """``fields`` of ``obj`` (a row already written) go in the next flush."""
        if obj.pk not in self._new_ids:
            self._dirty[obj].update(fields)

    def fence(self, *, ending: bool = False) -> None:
        """Inside a transaction: ``LeaseLost`` unless this execution still owns its run
        (``ending``: the transaction records the run's end too, ``fencing.fence``)."""
        if self.lost is not None and self.lost():
            raise LeaseLost(self.run_id)
        if self.epoch is not None:
            fence(self.run_id, self.epoch, ending=ending)

    def hold(self, type: str, payload: dict[str, Any]) -> bool:
        """Keep an event about rows still buffered for the flush that stores them; False
        (publish it now) when nothing is buffered."""
        if not self.pending:
            return False
        self._held.append((type, payload))
        return True

    def add_usage(self, record: UsageRecord) -> None:
        self._usage.append(record)

    @property
    def pending_usage(self) -> list[UsageRecord]:
        """Usage rows of calls whose messages are not written yet."""
        return self._usage

    def discard(self, message: Message, head: str | None) -> None:
        """Forget a message not written yet, and its parts (a step given up before its first
        token); the head goes back to ``head``."""
        ids = {message.pk} | {p.pk for p in getattr(message, "loaded_parts", [])}
        self._new_messages = [m for m in self._new_messages if m.pk not in ids]
        self._new_parts = [p for p in self._new_parts if p.pk not in ids]
        self._new_ids -= ids
        self._usage = [u for u in self._usage if u.message_id not in ids]
        for obj in [o for o in self._dirty if getattr(o, "pk", None) in ids]:
            del self._dirty[obj]
        self._head = head

    def closes(self, message_id: str) -> bool:
        """A ``step-finish`` of ``message_id`` waits for the next flush."""
        return any(
            p.type == Part.Type.STEP_FINISH and p.message_id == message_id for p in self._new_parts
        )

    def is_new(self, obj: Message | Part) -> bool:
        """Not written yet: the next flush inserts it."""
        return obj.pk in self._new_ids

    def set_head(self, message_id: str) -> None:
        self._head = message_id

    @property
    def pending(self) -> bool:
        return bool(
            self._new_messages or self._new_parts or self._dirty or self._head or self._usage
        )

    def flush(self, *, durable: bool = True, ending: bool = False) -> dict[str, Any]:
        """Write what changed since the last flush, in one transaction (or in the caller's,
        without a savepoint). ``durable=False`` (text streamed mid-step): the commit does not
        wait for the WAL to reach the disk — a database crash may lose the last fraction of a
        second of it, as a worker crash loses what was streamed since the last flush, and
        hundreds of streaming runs stop queueing on fsyncs. Tool batches and step ends are
        always durable. ``ending``: the caller's transaction records the run's end next
        (``lifecycle.finish``, which holds the session row): the run row is held for it from
        the fence on, and the head is left to the UPDATE that hands the session over (one
        write of the session row at the end, not two). Returns the session row's fields
        this flush wrote (its head) or, ``ending``, leaves to the caller to write."""
        if not self.pending:
            return {}
        new_messages, new_parts = self._new_messages, self._new_parts
        dirty, head, usage = self._dirty, self._head, self._usage
        for obj in [*new_messages, *new_parts]:
            _make_storable(obj)
        for obj, fields in dirty.items():
            _make_storable(obj, fields)
        held = self._held
        with transaction.atomic(savepoint=False):
            if not durable and connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL synchronous_commit TO OFF")
            if head and not ending:
                # The session row first (lock order: sessions_app/services/lock.py), then the
                # run's fence, then the rows.
                self.head_stamped = timezone.now()
                _SET_HEAD.update(
                    {"head_id": head, "updated_at": self.head_stamped}, id=self.session_id
                )
            self.fence(ending=ending)
            _MESSAGES.insert(new_messages)
            _PARTS.insert(new_parts)
            for obj, fields in dirty.items():
                _write_changed(obj, fields)
            record_usage(usage)
            if held:
                session_id = self.session_id
                transaction.on_commit(lambda: _publish(session_id, held))
        self._held = []
        self._new_messages, self._new_parts = [], []
        self._new_ids = set()
        self._dirty = defaultdict(set)
        self._head = None
        self._usage = []
        self.writes += 1
        if not head:
            return {}
        return {"head_id": head} if ending else {"head_id": head, "updated_at": self.head_stamped}


def _publish(session_id: str, held: list[tuple[str, dict[str, Any]]]) -> None:
    for type, payload in held:
        events.publish(session_id, type, **payload)


def write_streamed_texts(texts: list[tuple[str, str, str, int | None]]) -> set[str]:
    """The text streamed so far into parts already written, for every run of a host at once:
    one statement, not a transaction per run. Text only grows while it streams, so a row
    whose text is already as long (a step's own flush got there first) is left alone — the
    order in which the two land does not matter. Not durable, like ``flush(durable=False)``.

    ``texts``: (part id, text, run id, epoch). Only the texts of executions that still own
    their runs are written (one fencing statement for all); the others' run ids are
    returned: those executions lost their runs and must stop."""
    if not texts:
        return set()
    with transaction.atomic(), connection.cursor() as cursor:
        fenced = {(run_id, epoch) for _, _, run_id, epoch in texts if epoch is not None}
        live = owned(sorted(fenced))
        lost = {run_id for run_id, _ in fenced} - live
        texts = [
            (part_id, storable(text))
            for part_id, text, run_id, epoch in texts
            if epoch is None or run_id in live
        ]
        if not texts:
            return lost
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
            values = ", ".join(["(%s, %s)"] * len(texts))
            cursor.execute(
                "UPDATE sessions_app_part AS p SET text = v.text"
                f" FROM (VALUES {values}) AS v(id, text)"
                " WHERE p.id = v.id AND char_length(p.text) < char_length(v.text)",
                [x for pair in texts for x in pair],
            )
        else:
            cursor.executemany(
                "UPDATE sessions_app_part SET text = %s WHERE id = %s AND length(text) < %s",
                [(text, part_id, len(text)) for part_id, text in texts],
            )
    return lost


def _write_changed(obj: models.Model, fields: set[str]) -> None:
    """Stores ``fields`` of ``obj``, a row stored before, by an UPDATE compiled once for each
    model and set of fields (a run's input mark at every start: about a third of a
    millisecond of the worker's each time through the ORM). Never a run's status: only
    ``lifecycle.move`` writes it (tests/test_structure.py)."""
    model, values = type(obj), {f: getattr(obj, f) for f in fields}
    if "status" in fields:
        raise ValueError(f"{model.__name__}.status is not a checkpoint's to write")
    names = tuple(sorted(fields))
    update = update_of_shape(
        _CHANGED,
        (model, names),
        lambda: CompiledUpdate(lambda id: model.objects.filter(id=id), names, id=str),
    )
    update.update(values, id=obj.pk)
