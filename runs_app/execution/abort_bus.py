"""Abort requests reach a running loop at once: through Redis pub/sub in services mode (one
subscriber thread per process), through an in-process event in embedded mode. Which one a
process uses is decided by ``runtime.abort_bus()``. The database flag
(``Run.abort_requested``) stays the source of truth; the heartbeat still reads it, slowly,
in case a message is lost."""

from __future__ import annotations

import logging
import os
import threading
import time

import redis

log = logging.getLogger(__name__)
CHANNEL = "agentplat:abort"


class LocalAbortBus:
    """Aborts within this process: an Event per running run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, threading.Event] = {}

    def register(self, run_id: str) -> threading.Event:
        with self._lock:
            return self._events.setdefault(run_id, threading.Event())

    def unregister(self, run_id: str) -> None:
        with self._lock:
            self._events.pop(run_id, None)

    def _set(self, run_id: str) -> None:
        with self._lock:
            event = self._events.get(run_id)
        if event is not None:
            event.set()

    def notify(self, run_id: str) -> None:
        """Tell the loop of ``run_id`` to stop."""
        self._set(run_id)


class RedisAbortBus(LocalAbortBus):
    """Aborts across processes: a PUBLISH on one channel, heard by one subscriber thread in
    every process that runs loops (started with the first run it registers)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self._publisher: redis.Redis | None = None
        self._listener_pid = 0

    def register(self, run_id: str) -> threading.Event:
        event = super().register(run_id)
        self._ensure_listener()
        return event

    def notify(self, run_id: str) -> None:
        self._set(run_id)
        try:
            if self._publisher is None:
                self._publisher = redis.Redis.from_url(self.url)
            self._publisher.publish(CHANNEL, run_id)
        except Exception:  # the heartbeat's database poll still finds the flag
            log.exception("publishing the abort of %s failed", run_id)

    def _ensure_listener(self) -> None:
        with self._lock:
            if self._listener_pid == os.getpid():
                return
            self._listener_pid = os.getpid()  # a forked child starts its own
        threading.Thread(target=self._listen, name="abort-listener", daemon=True).start()

    def _listen(self) -> None:
        while True:
            try:
                client = redis.Redis.from_url(self.url)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(CHANNEL)
                for message in pubsub.listen():
                    if message.get("type") == "message":
                        self._set(message["data"].decode())
            except Exception:
                log.exception("abort listener lost Redis; reconnecting")
                time.sleep(1)


AbortBus = LocalAbortBus
