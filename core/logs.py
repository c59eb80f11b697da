"""Structured logs: every record carries the run and session it belongs to (set by the loop
for the duration of a run), as text or, with ``LOG_FORMAT=json``, one JSON object a line."""

from __future__ import annotations

import contextvars
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

_run_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("run_id", default=None)
_session_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("session_id", default=None)


@contextmanager
def log_context(*, run_id: str | None = None, session_id: str | None = None) -> Iterator[None]:
    tokens = (_run_id.set(run_id), _session_id.set(session_id))
    try:
        yield
    finally:
        _run_id.reset(tokens[0])
        _session_id.reset(tokens[1])


class ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.run_id = getattr(record, "run_id", None) or _run_id.get()
        record.session_id = getattr(record, "session_id", None) or _session_id.get()
        return True


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ids = " ".join(
            f"{k}={v}" for k in ("session_id", "run_id") if (v := getattr(record, k, None))
        )
        base = super().format(record)
        return f"{base} [{ids}]" if ids else base


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "session_id": getattr(record, "session_id", None),
            "run_id": getattr(record, "run_id", None),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)
