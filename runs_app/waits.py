"""Waiting for a run to end while holding nothing (issue 25, point 3).

A ``wait: true`` request used to poll the run's row every 50 ms for up to 600 s on a server
thread, holding that thread and a database connection all the while. Here a wait is a
coroutine on the server's loop:

* it listens to its session's group on the channel layer, where ``lifecycle`` publishes
  ``run.updated`` (and ``run.requires_action``) after each transition of the run commits;
* it reads the run's stored status when it has subscribed (the run may have ended before),
  on each event saying its run is done, and every ``RUN_WAIT_RECHECK_SECONDS`` (an event
  can be lost: a Redis restart, a publisher that died between its commit and its send).
  These reads are batched per loop: one query for every wait that asks at that moment, and
  the periodic check is one query for all the loop's waits; each on a thread of the loop's
  executor, its connection closed after;
* once the run has ended (or waits for its owner's decision) it reads the run whole, once.

Between those reads a wait holds no thread and no database connection. ``database_turn``
bounds how many requests of a process admit runs (or read a finished one) at once
(``RUN_ADMISSIONS_AT_ONCE``): a burst of hundreds of run requests takes turns instead of
taking, all at the same moment, a thread, a connection and a share of the interpreter from
the process's other requests.

Each user may hold ``RUN_WAITS_PER_USER_MAX`` waits at once across the web processes
(``take_slot``/``give_back``): in Redis in services mode, as a sorted set of the user's waits
scored by their deadline (a process that died mid-wait leaves slots that expire on their
own); in this process in embedded mode (there is one)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any

import redis
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connections

from core import request_threads
from core.errors import TooManyWaits
from realtime import events

from .execution import runtime
from .models import Run
from .selectors import run_data

log = logging.getLogger(__name__)

# How long a request waits at most; then it is answered with the run as it is (as before).
WAIT_SECONDS = 600.0
# A wait ends when its run has ended or stops for its owner's decision on a tool call.
DONE = frozenset({*Run.TERMINAL, Run.Status.REQUIRES_ACTION})
READ_BATCH = 500  # run ids a status query names at most
SLOT_SLACK_SECONDS = 60.0  # a slot outlives its wait's deadline by this much at most


# -- the database, in turns and briefly -------------------------------------------------------
def close_connections() -> None:
    """Give back this thread's database connections now (to the process's pool, or closed
    where there is none) rather than at the end of the request, unless a transaction holds
    one (a test's)."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close()


_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


@asynccontextmanager
async def database_turn() -> AsyncIterator[None]:
    """One of the ``RUN_ADMISSIONS_AT_ONCE`` turns of this loop (this process's requests).
    A request that queues for its turn holds no thread meanwhile either."""
    loop = asyncio.get_running_loop()
    turns = _turns.get(loop)
    if turns is None:
        turns = _turns[loop] = asyncio.Semaphore(max(1, settings.RUN_ADMISSIONS_AT_ONCE))
    if turns.locked():
        release_request_thread()
    async with turns:
        yield


def release_request_thread() -> None:
    """Let go of the thread this request's synchronous parts run on while it waits.

    A request's synchronous parts (the middleware's hooks, a sync view) run on a thread it
    holds until it ends (``core.request_threads``, config/asgi.py): a request that waits
    minutes would keep an idle thread that long. The thread goes back to the pool now; the
    request's next synchronous part (rendering the answer, the middleware on the way out)
    takes one again. Not served through it (the test client): nothing to do."""
    lease = request_threads.current_lease()
    if lease is not None:
        lease.release()


def _stored_statuses(run_ids: list[str]) -> dict[str, str]:
    try:
        found: dict[str, str] = {}
        for i in range(0, len(run_ids), READ_BATCH):
            chunk = run_ids[i : i + READ_BATCH]
            found.update(Run.objects.filter(id__in=chunk).values_list("id", "status"))
        return found
    finally:
        close_connections()


def _stored_run(run_id: str) -> dict[str, Any] | None:
    try:
        run = Run.objects.filter(id=run_id).first()
        return run_data(run) if run is not None else None
    finally:
        close_connections()


async def stored_run(run_id: str) -> dict[str, Any] | None:
    """The run as stored now (its API data), or None when it is gone."""
    async with database_turn():
        return await sync_to_async(_stored_run, thread_sensitive=False)(run_id)


class _Board:
    """The waits of one event loop and their runs' stored status. Every read is one query
    for all the runs asked about at that moment; every ``RUN_WAIT_RECHECK_SECONDS`` one
    query checks every watched run and wakes the waits whose run is done (or gone)."""

    def __init__(self) -> None:
        self.watched: dict[str, set[asyncio.Event]] = {}
        self.asked: dict[str, list[asyncio.Future[str | None]]] = {}
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def watch(self, run_id: str, woken: asyncio.Event) -> None:
        self.watched.setdefault(run_id, set()).add(woken)
        self._serve()

    def unwatch(self, run_id: str, woken: asyncio.Event) -> None:
        waits = self.watched.get(run_id)
        if waits is not None:
            waits.discard(woken)
            if not waits:
                del self.watched[run_id]
        if not self.watched:
            self.wake.set()  # nothing left to check: the server ends

    async def status(self, run_id: str) -> str | None:
        """The run's stored status (None: no such run), read with the others asked now."""
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self.asked.setdefault(run_id, []).append(future)
        self.wake.set()
        self._serve()
        return await future

    def _serve(self) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._server())

    async def _server(self) -> None:
        try:
            await self._serve_reads()
        finally:  # cancelled with its loop, or a bug: no wait is left hanging on a read
            for futures in self.asked.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(RuntimeError("the status reads stopped"))
            self.asked = {}

    async def _serve_reads(self) -> None:
        loop = asyncio.get_running_loop()
        every = max(0.05, settings.RUN_WAIT_RECHECK_SECONDS)
        due = loop.time() + every
        while self.watched or self.asked:
            if not self.asked:
                with suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), max(0.0, due - loop.time()))
            self.wake.clear()
            asked, self.asked = self.asked, {}
            sweep = loop.time() >= due
            ids = set(asked) | (set(self.watched) if sweep else set())
            if sweep:
                due = loop.time() + every
            if not ids:
                continue
            try:
                read = sync_to_async(_stored_statuses, thread_sensitive=False)
                statuses = await read(sorted(ids))
            except Exception as exc:
                log.warning("reading the status of %d waited runs failed: %s", len(ids), exc)
                for futures in asked.values():
                    for future in futures:
                        if not future.done():
                            future.set_exception(exc)
                continue
            for run_id, futures in asked.items():
                for future in futures:
                    if not future.done():
                        future.set_result(statuses.get(run_id))
            if sweep:
                for run_id in ids & set(self.watched):
                    status = statuses.get(run_id)
                    if status is None or status in DONE:  # done, or gone
                        for woken in self.watched[run_id]:
                            woken.set()


_boards: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Board] = weakref.WeakKeyDictionary()


def _board() -> _Board:
    loop = asyncio.get_running_loop()
    board = _boards.get(loop)
    if board is None:
        board = _boards[loop] = _Board()
    return board


async def stored_status(run_id: str) -> str | None:
    """The run's stored status, read in this loop's next batch (None: no such run)."""
    return await _board().status(run_id)


# -- the wait ---------------------------------------------------------------------------------
def _about(message: dict[str, Any], run_id: str) -> bool:
    """Whether a session event says that ``run_id`` is done (most events are text deltas).
    Its other transitions (``running``) need no read: the one that ends it has its own
    event, and should that be lost, the periodic check finds the end."""
    text = message.get("text") or ""
    if run_id not in text:
        return False
    try:
        event = json.loads(text)
    except ValueError:
        return False
    if event.get("type") not in (events.RUN_UPDATED, events.RUN_REQUIRES_ACTION):
        return False
    run = event.get("run") or {}
    return run.get("id") == run_id and run.get("status") in DONE


async def _listen(layer: Any, channel: str, run_id: str, woken: asyncio.Event) -> None:
    try:
        while True:
            if _about(await layer.receive(channel), run_id):
                woken.set()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the periodic check goes on without events
        log.warning("the wait for %s lost the channel layer: %s", run_id, exc)


async def wait_for_run(
    run_id: str, session_id: str, *, timeout: float | None = None
) -> dict[str, Any] | None:
    """The run (its API data) once it has ended or waits for its owner's decision, or as it
    is after ``timeout`` seconds (``WAIT_SECONDS``); None when it is gone (its session was
    deleted meanwhile)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (WAIT_SECONDS if timeout is None else timeout)
    board = _board()
    woken = asyncio.Event()
    board.watch(run_id, woken)
    layer, channel, listener = None, "", None
    group = events.group_name(session_id)
    try:
        try:
            layer = get_channel_layer()
            channel = await layer.new_channel()
            await layer.group_add(group, channel)
            listener = loop.create_task(_listen(layer, channel, run_id, woken))
        except Exception as exc:  # no events: the periodic check finds the end
            log.warning("the wait for %s could not subscribe: %s", run_id, exc)
            layer = None
        while True:
            woken.clear()  # before the read: an event during the read wakes the next round
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                status = await asyncio.wait_for(board.status(run_id), left)
            except TimeoutError:
                break
            except Exception:
                status = ""  # the database did not answer: the next event or check reads again
            if status is None or status in DONE:
                break
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(woken.wait(), left)
            except TimeoutError:
                break
    finally:
        if listener is not None:
            listener.cancel()
        board.unwatch(run_id, woken)
        if layer is not None:
            try:
                await layer.group_discard(group, channel)
            except Exception as exc:
                log.warning("the wait for %s could not unsubscribe: %s", run_id, exc)
    return await stored_run(run_id)


# -- how many waits a user holds ------------------------------------------------------------
@dataclass(frozen=True)
class Slot:
    key: str
    token: str


# KEYS[1]: the user's waits; ARGV: now, this wait's expiry, the limit, its token, the key's TTL.
_TAKE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""

_client: redis.Redis | None = None
_take: Any = None
_client_pid = 0
_client_lock = threading.Lock()
_local: dict[str, set[str]] = {}
_local_lock = threading.Lock()


def _redis() -> redis.Redis:
    global _client, _take, _client_pid
    with _client_lock:
        if _client is None or _client_pid != os.getpid():
            _client = redis.Redis.from_url(
                runtime.redis_url(), socket_timeout=2, socket_connect_timeout=2
            )
            _take = _client.register_script(_TAKE)
            _client_pid = os.getpid()
        return _client


def _key(user_id: int) -> str:
    # Users are rows of one database: deployments (and test databases) sharing a Redis
    # count apart.
    return f"agentplat:waits:{connections['default'].settings_dict['NAME']}:{user_id}"


def too_many(limit: int) -> TooManyWaits:
    return TooManyWaits(
        f"You have {limit} requests waiting for runs to end already, the most at once "
        "(RUN_WAITS_PER_USER_MAX). Wait for one to end, or start the run without wait and "
        "follow it (GET /api/runs/{id}/ or the session's events)."
    )


def take_slot(user_id: int) -> Slot | None:
    """A slot for one more wait of ``user_id``; 429 ``TooManyWaits`` past the limit. None
    when nothing is counted (no limit, or Redis did not answer: then waits are not refused)."""
    limit = settings.RUN_WAITS_PER_USER_MAX
    if limit <= 0:
        return None
    slot = Slot(_key(user_id), uuid.uuid4().hex)
    if runtime.embedded():
        with _local_lock:
            held = _local.setdefault(slot.key, set())
            if len(held) >= limit:
                raise too_many(limit)
            held.add(slot.token)
        return slot
    now = time.time()
    expires = now + WAIT_SECONDS + SLOT_SLACK_SECONDS
    try:
        _redis()
        taken = _take(
            keys=[slot.key],
            args=[now, expires, limit, slot.token, int(WAIT_SECONDS + 2 * SLOT_SLACK_SECONDS)],
        )
    except redis.RedisError as exc:
        log.warning("counting the waits of user %s failed: %s", user_id, exc)
        return None
    if not taken:
        raise too_many(limit)
    return slot


def give_back(slot: Slot | None) -> None:
    if slot is None:
        return
    if runtime.embedded():
        with _local_lock:
            held = _local.get(slot.key)
            if held is not None:
                held.discard(slot.token)
                if not held:
                    del _local[slot.key]
        return
    try:
        _redis().zrem(slot.key, slot.token)
    except redis.RedisError as exc:  # it expires on its own
        log.warning("giving back a wait slot failed: %s", exc)


async def give_back_async(slot: Slot | None) -> None:
    """``give_back`` from the loop; it completes even when the request is being cancelled."""
    if slot is not None:
        await asyncio.shield(sync_to_async(give_back, thread_sensitive=False)(slot))


def held(user_id: int) -> int:
    """How many waits ``user_id`` holds now (tests, the admin)."""
    key = _key(user_id)
    if runtime.embedded():
        with _local_lock:
            return len(_local.get(key, ()))
    client = _redis()
    client.zremrangebyscore(key, "-inf", time.time())
    return int(client.zcard(key))
