"""Waits on what the code under test does, never on time: a test that must act once something
has happened (a subscription is known to Redis, a statement is waiting for a lock another
holds, a socket's watch has ended) polls for that fact here, within a timeout, instead of
sleeping a guess of how long it takes. ``tests/conftest.py`` ``wait_until`` is the same for
plain predicates; ``tests/test_test_hygiene.py`` keeps sleeps out of the tests themselves."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import redis
from django.conf import settings
from django.db import connection


async def until(
    predicate: Callable[[], Any], timeout: float = 10.0, what: str = "it", every: float = 0.01
) -> Any:
    """(On a loop.) The predicate's first truthy value within ``timeout`` seconds, else a
    failure; the loop runs on between two looks."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def redis_subscribers(group: str) -> int:
    """How many connections Redis counts on the pub/sub channel of the channel layer's
    ``group`` (the layer's prefix and name scheme: config/settings.py, channels_redis)."""
    layer = settings.CHANNEL_LAYERS["default"]
    if "hosts" not in layer.get("CONFIG", {}):
        return 1  # the in-memory layer: a subscription is there once group_add returned
    channel = f"{layer['CONFIG'].get('prefix', 'asgi')}__group__{group}"
    client = redis.Redis.from_url(layer["CONFIG"]["hosts"][0])
    try:
        return dict(client.pubsub_numsub(channel)).get(channel.encode(), 0)
    finally:
        client.close()


async def subscribed(group: str, timeout: float = 5.0) -> None:
    """Until Redis delivers what is published to ``group`` to this process: a SUBSCRIBE that
    was sent is not yet one the server has taken, and an event published before is lost."""
    await until(lambda: redis_subscribers(group) > 0, timeout, f"a subscriber of {group}")


def backend_pid() -> int:
    """The PostgreSQL backend of this thread's connection (opened if need be)."""
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def blocked_by(pid: int) -> list[int]:
    """The backends waiting for a lock that backend ``pid`` holds. Read from the lock table
    (live, unlike ``pg_stat_activity``, which a transaction sees as of its first look)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT pid FROM pg_locks"
            " WHERE NOT granted AND %s = ANY(pg_blocking_pids(pid))",
            [pid],
        )
        return [row[0] for row in cursor.fetchall()]
