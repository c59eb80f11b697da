"""The one place events are named, numbered and published.

Every event is ``{"type", "session_id", "seq", "prev", ...}``: ``seq`` increases per session;
``prev`` is the ``seq`` of the session's event published just before it, whichever process
published that one (null when it is not known: the session's first event, or a counter lost),
so a client that last saw another number knows it missed events and re-reads the database
(see ``_number``). Numbers are not consecutive (``seq`` is about the publishing time in µs).

Publishing goes through one long-lived asyncio loop per process: group sends awaited inside
one loop cost a fraction of ``async_to_sync(group_send)`` per call. Text deltas are coalesced
per part into frames of at most ``STREAM_FRAME_MS``: the first delta after a quiet frame goes
out at once, later ones wait for the frame's end. Before any other event of a session its
pending deltas are flushed, so a client sees events in the order they happened.

Writers call ``publish_on_commit``: an event describes stored state, so it leaves only after
the transaction that stored it commits (Zulip's ``send_event_on_commit``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers, get_channel_layer
from django.conf import settings
from django.db import transaction

from .channel_layer import PREV_MARK, SEQ_MARK

log = logging.getLogger(__name__)
SEND_BATCH = 500  # events a Redis round trip carries at most
BUSY_PER_100MS = 100  # above this many events in 100 ms, a batch lingers SEND_LINGER first
SEND_LINGER = 0.003
SEND_RETRY_SECONDS = 15.0  # a batch that Redis refuses is tried again this long

SESSION_STATUS = "session.status"
SESSION_UPDATED = "session.updated"
SESSION_DIFF = "session.diff"
SESSION_ERROR = "session.error"
SESSION_PREPARE = "session.prepare"  # a clone's progress: {phase, done, total}
RUN_UPDATED = "run.updated"
MESSAGE_UPDATED = "message.updated"
MESSAGE_REMOVED = "message.removed"
PART_UPDATED = "message.part.updated"
PART_REMOVED = "message.part.removed"
TEXT_DELTA = "text-delta"
REASONING_DELTA = "reasoning-delta"
TOOL_OUTPUT_DELTA = "tool-output-delta"
RUN_REQUIRES_ACTION = "run.requires_action"

EVENT_TYPES = frozenset(
    {
        SESSION_STATUS,
        SESSION_UPDATED,
        SESSION_DIFF,
        SESSION_ERROR,
        SESSION_PREPARE,
        RUN_UPDATED,
        MESSAGE_UPDATED,
        MESSAGE_REMOVED,
        PART_UPDATED,
        PART_REMOVED,
        TEXT_DELTA,
        REASONING_DELTA,
        TOOL_OUTPUT_DELTA,
        RUN_REQUIRES_ACTION,
    }
)


def group_name(session_id: str) -> str:
    return f"agentplat.session.{session_id}"


@dataclass
class _PendingDelta:
    type: str
    message_id: str
    part_id: str
    offset: int
    chunks: list[str] = field(default_factory=list)


class Publisher:
    """Owns the process's publishing loop. Thread-safe entry points: ``publish``, ``delta``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._external_loop = False
        self._pid = 0
        self._queue: asyncio.Queue | None = None
        self._layer: Any = None
        self._seq: dict[str, int] = {}  # session → its last seq (layers without reserve_seqs)
        self._unsure: set[str] = set()  # sessions whose events were lost before being numbered
        self._pending: dict[str, dict[str, _PendingDelta]] = {}
        self._last_sent: dict[str, float] = {}
        self._scheduled: set[str] = set()
        self._idle = threading.Event()
        self._idle.set()
        self._inflight = 0
        self._loop_thread = 0
        self._streaming: dict[str, float] = {}  # session → its last delta (the last second)
        self._streaming_swept = 0.0

    # -- setup ------------------------------------------------------------------------------
    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Embedded mode: publish on the ASGI server's loop, where the in-memory layer lives."""
        with self._lock:
            if self._loop is loop:
                return
            self._loop = loop
            self._external_loop = True
            self._loop_thread = 0  # until the loop itself says which thread it runs in
            self._pid = os.getpid()
            self._queue = None
            self._layer = None
            loop.call_soon_threadsafe(self._start_sender)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is not None and self._pid == os.getpid() and not self._loop.is_closed():
                return self._loop
            # A fresh process (Celery prefork child) or no server loop: run our own.
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._external_loop = False
            self._pid = os.getpid()
            self._queue = None
            self._layer = None
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            threading.Thread(target=run, name="event-publisher", daemon=True).start()
            ready.wait(5)
            loop.call_soon_threadsafe(self._start_sender)
            return loop

    def _start_sender(self) -> None:
        self._loop_thread = threading.get_ident()
        if self._queue is None:
            self._queue = asyncio.Queue()
            asyncio.get_running_loop().create_task(self._sender())

    def _get_layer(self) -> Any:
        if self._layer is None:
            # On the server's loop (``bind_loop``, embedded mode) the server's own layer is
            # the one its sockets listen to; on a loop of our own, an instance of our own:
            # a layer's connections belong to the loop that made them.
            self._layer = (
                get_channel_layer()
                if self._external_loop
                else channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
            )
        return self._layer

    # -- thread-safe API -------------------------------------------------------------------
    def publish(self, session_id: str, type: str, payload: dict[str, Any]) -> None:
        assert type in EVENT_TYPES, type
        self._submit(self._on_event, session_id, type, payload)

    def delta(
        self, session_id: str, type: str, message_id: str, part_id: str, offset: int, text: str
    ) -> None:
        self._submit(self._on_delta, session_id, type, message_id, part_id, offset, text)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything submitted so far has been sent (tests, process exit)."""
        loop = self._ensure_loop()
        done = threading.Event()

        def mark() -> None:
            for sid in list(self._pending):
                self._flush_session(sid)
            assert self._queue is not None
            self._queue.put_nowait(("__mark__", done))

        loop.call_soon_threadsafe(mark)
        return done.wait(timeout)

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._ensure_loop()
        if threading.get_ident() == self._loop_thread:
            fn(*args)  # already on the loop (the run host's runs): no hop, no wake-up
        else:
            loop.call_soon_threadsafe(fn, *args)

    # -- loop side ------------------------------------------------------------------------
    def _on_event(self, session_id: str, type: str, payload: dict[str, Any]) -> None:
        self._flush_session(session_id)
        self._enqueue(session_id, type, payload)

    def _on_delta(
        self, session_id: str, type: str, message_id: str, part_id: str, offset: int, text: str
    ) -> None:
        parts = self._pending.setdefault(session_id, {})
        pending = parts.get(part_id)
        if pending is None or pending.type != type:
            if pending is not None:
                self._flush_session(session_id)
                parts = self._pending.setdefault(session_id, {})
            pending = parts[part_id] = _PendingDelta(type, message_id, part_id, offset)
        pending.chunks.append(text)
        now = time.monotonic()
        due = self._last_sent.get(session_id, 0.0) + self._frame(session_id, now)
        if now >= due:
            self._flush_session(session_id)
        elif session_id not in self._scheduled:
            self._scheduled.add(session_id)
            asyncio.get_running_loop().call_later(due - now, self._flush_scheduled, session_id)

    def _frame(self, session_id: str, now: float) -> float:
        """The frame of a session's deltas, in seconds: ``STREAM_FRAME_MS`` while few
        sessions stream from this process; wider as more do (proportionally beyond
        ``STREAM_FRAME_SESSIONS``, up to ``STREAM_FRAME_MAX_MS``), so that hundreds of
        streams cost fewer, fuller frames — in this process, in Redis, in Daphne and in the
        browsers — instead of a backlog that delays them all."""
        self._streaming[session_id] = now
        if now - self._streaming_swept > 1.0:
            self._streaming_swept = now
            self._streaming = {s: t for s, t in self._streaming.items() if now - t < 1.0}
        count = len(self._streaming)
        frame = settings.STREAM_FRAME_MS * max(1.0, count / settings.STREAM_FRAME_SESSIONS)
        return min(frame, max(settings.STREAM_FRAME_MS, settings.STREAM_FRAME_MAX_MS)) / 1000.0

    def _flush_scheduled(self, session_id: str) -> None:
        self._scheduled.discard(session_id)
        self._flush_session(session_id)

    def _flush_session(self, session_id: str) -> None:
        parts = self._pending.pop(session_id, None)
        if not parts:
            return
        if len(self._last_sent) > 10_000:  # bounded: a long-lived worker sees many sessions
            self._last_sent.clear()
        self._last_sent[session_id] = time.monotonic()
        for p in parts.values():
            self._enqueue(
                session_id,
                p.type,
                {
                    "message_id": p.message_id,
                    "part_id": p.part_id,
                    "offset": p.offset,
                    "text": "".join(p.chunks),
                },
            )

    def _enqueue(self, session_id: str, type: str, payload: dict[str, Any]) -> None:
        if self._queue is None:
            self._start_sender()
        assert self._queue is not None
        # ``time.time()`` at the hand-over: the fan-out latency is measured from here (the
        # consumer observes it when it sends the event to its socket: sessions_app/metrics).
        self._queue.put_nowait((session_id, type, payload, time.time()))

    async def _number(self, session_ids: list[str]) -> list[tuple[int | None, int]]:
        """``(prev, seq)`` for each of these events, in order. Where several processes
        publish to a session (the web process's moves and approvals, the worker holding its
        run), one counter in Redis numbers them all: the channel layer's ``reserve_seqs``, one
        round trip per batch (a layer that numbers in Redis does it as it publishes:
        ``_numbered_in_redis``). A layer without it (the in-memory one: one process) is
        numbered here. ``seq`` stays about the publishing time in µs (at least now, bumped to
        increase). A batch lost before it was numbered (Redis away) leaves no trace in the
        counter: the next event of each of its sessions then says ``prev`` null (unknown)."""
        counts = Counter(session_ids)
        now = time.time_ns() // 1000
        reserve = getattr(self._get_layer(), "reserve_seqs", None)
        if reserve is None:
            starts = {sid: self._reserve_here(sid, n, now) for sid, n in counts.items()}
        else:
            try:
                got = await reserve({group_name(sid): n for sid, n in counts.items()}, now)
            except Exception:
                if len(self._unsure) < 10_000:
                    self._unsure.update(counts)
                raise
            starts = {sid: got[group_name(sid)] for sid in counts}
        for sid in self._unsure.intersection(counts):
            starts[sid] = (None, starts[sid][1])
            self._unsure.discard(sid)
        out = []
        for sid in session_ids:
            prev, seq = starts[sid]
            out.append((prev, seq))
            starts[sid] = (seq, seq + 1)
        return out

    def _reserve_here(self, session_id: str, count: int, now: int) -> tuple[int | None, int]:
        prev = self._seq.get(session_id)
        first = max((prev or 0) + 1, now)
        if len(self._seq) >= 10_000:  # bounded; a forgotten session's next prev is null
            self._seq.clear()
        self._seq[session_id] = first + count - 1
        return prev, first

    async def _sender(self) -> None:
        """Sends what is queued, a batch at a time: every event queued while the previous
        batch was on its way goes in the next one, in one Redis round trip (a layer with
        ``group_send_many``), so a busy process sends more per round trip instead of queueing
        behind one round trip per frame."""
        assert self._queue is not None
        queue = self._queue
        window_start, window_count = time.monotonic(), 0
        while True:
            batch = [await queue.get()]
            now = time.monotonic()
            if now - window_start > 0.1:
                window_start, window_count = now, 0
            if window_count > BUSY_PER_100MS:
                # Many frames a second (hundreds of live runs): wait a moment so that one
                # write carries many, instead of a system call per frame. A quiet process
                # (one chat) never waits.
                await asyncio.sleep(SEND_LINGER)
            while not queue.empty() and len(batch) < SEND_BATCH:
                batch.append(queue.get_nowait())
            marks = [item[1] for item in batch if item[0] == "__mark__"]
            items = [item for item in batch if item[0] != "__mark__"]
            window_count += len(items)
            await self._send_items(items)
            for mark in marks:
                mark.set()

    async def _send_items(self, items: list[tuple]) -> None:
        """Number and send ``items``; a Redis that is away (restarting) is tried again for up
        to ``SEND_RETRY_SECONDS``, so the events of that moment arrive late rather than
        never (each try numbers them anew: a counter Redis lost makes ``prev`` null, and the
        clients re-read)."""
        deadline = time.monotonic() + SEND_RETRY_SECONDS
        delay = 0.05
        while True:
            try:
                await self._number_and_send(items)
                return
            except Exception as exc:
                if time.monotonic() + delay > deadline:
                    # Lost: the next event's ``prev`` tells the clients to re-read.
                    log.exception("publishing %d events failed", len(items))
                    return
                log.warning("publishing %d events failed (%s); trying again", len(items), exc)
                await asyncio.sleep(delay)
                delay = min(1.0, delay * 2)

    async def _number_and_send(self, items: list[tuple]) -> None:
        layer = self._get_layer()
        if items and getattr(layer, "numbers_in_redis", lambda: False)():
            await self._numbered_in_redis(layer, items)
            return
        numbers = await self._number([item[0] for item in items]) if items else []
        messages = [
            _message(item, seq, prev) for item, (prev, seq) in zip(items, numbers, strict=True)
        ]
        await self._send(messages)

    async def _numbered_in_redis(self, layer: Any, items: list[tuple]) -> None:
        """``_number`` and ``_send`` in one round trip: Redis numbers the events and publishes
        them (``number_and_publish``), each event's JSON made with marks where its numbers
        go. A batch that fails may have been published or not: the next event of each of
        its sessions says ``prev`` null, and the clients re-read."""
        sessions = {item[0] for item in items}
        unknown = {group_name(sid) for sid in self._unsure.intersection(sessions)}
        messages = [_message(item, SEQ_MARK, PREV_MARK) for item in items]
        try:
            await layer.number_and_publish(messages, unknown=unknown, now_us=time.time_ns() // 1000)
        except Exception:
            if len(self._unsure) < 10_000:
                self._unsure.update(sessions)
            raise
        self._unsure.difference_update(sessions)

    async def _send(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        if not messages:
            return
        layer = self._get_layer()
        many = getattr(layer, "group_send_many", None)
        if many is not None:
            await many(messages)
            return
        for group, message in messages:
            await layer.group_send(group, message)


def _message(item: tuple, seq: int, prev: int | None) -> tuple[str, dict[str, Any]]:
    """The group message of a queued event ``(session_id, type, payload, at)``: its JSON made
    once, for every socket of the session."""
    session_id, type, payload, at = item
    event = {"type": type, "session_id": session_id, "seq": seq, "prev": prev, **payload}
    text = json.dumps(event, default=str)
    return group_name(session_id), {"type": "session.event", "text": text, "at": at}


publisher = Publisher()


def publish(session_id: str, type: str, **payload: Any) -> None:
    """Publish now. Only for transient state (deltas, live tool progress) or after commit."""
    publisher.publish(session_id, type, payload)


def publish_on_commit(session_id: str, type: str, **payload: Any) -> None:
    transaction.on_commit(lambda: publisher.publish(session_id, type, payload))


def publish_delta(
    session_id: str, *, message_id: str, part_id: str, offset: int, text: str, reasoning: bool
) -> None:
    publisher.delta(
        session_id, REASONING_DELTA if reasoning else TEXT_DELTA, message_id, part_id, offset, text
    )


def publish_tool_output(
    session_id: str, *, message_id: str, part_id: str, offset: int, text: str
) -> None:
    """A running tool's output as it comes, coalesced into frames like text deltas."""
    publisher.delta(session_id, TOOL_OUTPUT_DELTA, message_id, part_id, offset, text)
