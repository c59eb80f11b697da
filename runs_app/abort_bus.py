"""Abort requests reach a running loop at once: a Redis PUBLISH in services mode (one
subscriber thread per worker process), an in-process Event in embedded mode. The database
flag (``Run.abort_requested``) stays the source of truth; the heartbeat still reads it, slowly,
in case a message is lost."""

from __future__ import annotations

import logging
import os
import threading

from django.conf import settings

log = logging.getLogger(__name__)
CHANNEL = "agentplat:abort"

_lock = threading.Lock()
_events: dict[str, threading.Event] = {}
_listener_pid = 0
_publisher = None


def register(run_id: str) -> threading.Event:
    with _lock:
        event = _events.setdefault(run_id, threading.Event())
    if not settings.EMBEDDED:
        _ensure_listener()
    return event


def unregister(run_id: str) -> None:
    with _lock:
        _events.pop(run_id, None)


def _set(run_id: str) -> None:
    with _lock:
        event = _events.get(run_id)
    if event is not None:
        event.set()


def notify(run_id: str) -> None:
    """Tell the loop of ``run_id``, wherever it runs, to stop."""
    _set(run_id)
    if settings.EMBEDDED:
        return
    global _publisher
    try:
        if _publisher is None:
            import redis

            _publisher = redis.Redis.from_url(settings.REDIS_URL)
        _publisher.publish(CHANNEL, run_id)
    except Exception:  # the heartbeat's database poll still finds the flag
        log.exception("publishing the abort of %s failed", run_id)


def _ensure_listener() -> None:
    global _listener_pid
    with _lock:
        if _listener_pid == os.getpid():
            return
        _listener_pid = os.getpid()
    threading.Thread(target=_listen, name="abort-listener", daemon=True).start()


def _listen() -> None:
    import time

    import redis

    while True:
        try:
            client = redis.Redis.from_url(settings.REDIS_URL)
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(CHANNEL)
            for message in pubsub.listen():
                if message.get("type") == "message":
                    _set(message["data"].decode())
        except Exception:
            log.exception("abort listener lost Redis; reconnecting")
            time.sleep(1)
