"""Prefixed, time-sortable ids: ``<prefix>_<12 hex ms><4 hex counter><10 hex random>``.

Within one process ids are strictly increasing (the counter breaks ties inside a
millisecond); across processes they sort by creation millisecond.
"""

from __future__ import annotations

import secrets
import threading
import time

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_id(prefix: str) -> str:
    global _last_ms, _counter
    with _lock:
        now = int(time.time() * 1000)
        if now <= _last_ms:
            _counter += 1
            if _counter > 0xFFFF:
                _last_ms += 1
                _counter = 0
            now = _last_ms
        else:
            _last_ms = now
            _counter = 0
        counter = _counter
    return f"{prefix}_{now:012x}{counter:04x}{secrets.token_hex(5)}"


def session_id() -> str:
    return new_id("ses")


def message_id() -> str:
    return new_id("msg")


def part_id() -> str:
    return new_id("prt")


def share_token() -> str:
    return secrets.token_urlsafe(24)


def credential_id() -> str:
    return new_id("crd")


def prepare_id() -> str:
    """The busy lock's holder while a session's worktree is being filled (a clone)."""
    return new_id("prep")
