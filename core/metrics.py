"""The Prometheus instruments that processes update as things happen: tokens counted, events
fanned out to websockets, waits for a session's locks. ``runs_app/metrics.py`` serves them at
``/metrics`` with what is read at scrape time (runs by status, queue depth).

Each update is an increment or an observation (a few microseconds; nothing per token beyond
one increment per model call). With ``PROMETHEUS_MULTIPROC_DIR`` set (services mode: the same
directory for Daphne and the workers of a machine) prometheus_client keeps every process's
values in a file of that directory, and the scrape adds them up; without it they live in this
process (embedded mode: one process does everything).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import Counter, Histogram

from . import models_catalog

# Seconds: a frame to a websocket takes milliseconds; a lock may be held for a run's step.
_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SLOW = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)

TOKENS = Counter(
    "agentplat_tokens",
    "Tokens of model calls, as recorded in the calls' usage, by model and kind "
    "(input, output, cached_input).",
    ["model", "kind"],
)
MODEL_CALLS = Counter("agentplat_model_calls", "Model calls whose usage was recorded.", ["model"])
FANOUT = Histogram(
    "agentplat_event_fanout_seconds",
    "From an event's hand-over to the channel layer by its publisher to a websocket consumer "
    "sending it to its socket (the publisher's queue, Redis, Daphne).",
    buckets=_FAST,
)
LOCK_WAIT = Histogram(
    "agentplat_lock_wait_seconds",
    "Time to acquire a session's lock. lock=row: SELECT ... FOR UPDATE of the session row; "
    "lock=busy: a run's wait for the session's busy lock, from its request to its claim "
    "(queued behind another run: until the hand-over).",
    ["lock"],
    buckets=_SLOW,
)
_ROW_WAIT = LOCK_WAIT.labels("row")
_BUSY_WAIT = LOCK_WAIT.labels("busy")
_KINDS = (
    ("input_tokens", "input"),
    ("output_tokens", "output"),
    ("cached_input_tokens", "cached_input"),
)


def multiprocess() -> bool:
    """Values are shared through files between the processes of a machine."""
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


def count_tokens(model: str, usage: dict[str, Any]) -> None:
    """One model call's recorded usage (``input_tokens``, ``output_tokens``, …). A model
    outside the deployment's catalogue (``AGENT_MODELS``, else ``AGENT_MODEL``) counts as
    ``other``: a label's values stay as few as the models offered."""
    model = model if models_catalog.find(model) is not None else "other"
    MODEL_CALLS.labels(model).inc()
    for key, kind in _KINDS:
        value = usage.get(key)
        if value:
            TOKENS.labels(model, kind).inc(value)


def observe_fanout(published_at: float | None) -> None:
    """An event sent to a socket; ``published_at``: ``time.time()`` at its hand-over (the
    publisher's and this process's clocks are one machine's, or NTP-synced ones)."""
    if published_at is not None:
        FANOUT.observe(max(0.0, time.time() - published_at))


def observe_busy_wait(seconds: float) -> None:
    _BUSY_WAIT.observe(max(0.0, seconds))


@contextmanager
def row_lock_wait() -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        _ROW_WAIT.observe(time.perf_counter() - started)
