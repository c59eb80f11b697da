"""Celery entry of the streaming benchmark: the project's own app, with one probe.

``celery -A bench.worker worker ...`` runs the unmodified task code; the only change is that
``realtime.events.publish_delta`` notes ``time.time()`` when the engine hands it a token
(the moment the model's delta leaves the loop), keyed by ``(part_id, offset)``. The notes go
to ``$BENCH_EMIT_DIR/emit-<pid>.tsv`` from a background thread every 100 ms, so the probe costs
the hot path one ``list.append``.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import django
from celery.signals import worker_init

from config.celery import app
from realtime import events

__all__ = ["app"]

_DIR = Path(os.environ.get("BENCH_EMIT_DIR", "/tmp"))
_original = events.publish_delta
_records: list[tuple[float, str, int, int]] = []
_pid = 0
_guard = threading.Lock()


def _writer() -> None:
    path = _DIR / f"emit-{os.getpid()}.tsv"
    while True:
        time.sleep(0.1)
        batch = _records[:]
        if not batch:
            continue
        del _records[: len(batch)]
        with path.open("a") as fh:
            fh.writelines(f"{t:.6f}\t{part}\t{off}\t{n}\n" for t, part, off, n in batch)


def _ensure_writer() -> None:
    global _pid
    if _pid == os.getpid():
        return
    with _guard:
        if _pid != os.getpid():  # a fresh pool child: threads do not survive fork
            _records.clear()
            threading.Thread(target=_writer, name="bench-emit", daemon=True).start()
            _pid = os.getpid()


def timed_publish_delta(
    session_id: str, *, message_id: str, part_id: str, offset: int, text: str, reasoning: bool
) -> None:
    emitted = time.time()
    _ensure_writer()
    _original(
        session_id,
        message_id=message_id,
        part_id=part_id,
        offset=offset,
        text=text,
        reasoning=reasoning,
    )
    _records.append((emitted, part_id, offset, len(text)))


events.publish_delta = timed_publish_delta


# -- a profile of the run host's loop, on request -------------------------------------------
# The bench writes "start" or "stop" to $BENCH_PROFILE_DIR/cmd; the loop thread's cProfile
# starts fresh or stops and writes $BENCH_PROFILE_DIR/host.pstats. Only where the worker has a
# run host (the current code; an older worker checked out for comparison has none).
_PROFILE_DIR = os.environ.get("BENCH_PROFILE_DIR")


def _profile_control(loop) -> None:  # noqa: ANN001
    import cProfile

    state: dict[str, cProfile.Profile] = {}
    cmd = Path(_PROFILE_DIR) / "cmd"

    def start() -> None:
        state["p"] = cProfile.Profile()
        state["p"].enable()

    def stop() -> None:
        profile = state.pop("p", None)
        if profile is not None:
            profile.disable()
            profile.dump_stats(str(Path(_PROFILE_DIR) / "host.pstats"))

    while True:
        time.sleep(0.2)
        try:
            order = cmd.read_text().strip()
        except FileNotFoundError:
            continue
        cmd.unlink(missing_ok=True)
        loop.call_soon_threadsafe(start if order == "start" else stop)


@worker_init.connect
def _watch_for_profile_orders(**_kwargs: object) -> None:
    """Once Django is set up (``runs_app.execution.runtime`` imports models): the host's start-up
    starts the thread that takes the bench's profile orders."""
    if not _PROFILE_DIR:
        return
    django.setup()
    try:
        from runs_app.execution import runtime
    except ImportError:  # pragma: no cover - an older checkout
        try:
            from runs_app import runtime
        except ImportError:
            return
    if not hasattr(runtime, "host_started"):
        return
    host_started = runtime.host_started

    def started(loop) -> None:  # noqa: ANN001
        host_started(loop)
        threading.Thread(target=_profile_control, args=(loop,), daemon=True).start()

    runtime.host_started = started


# -- garbage collection pauses, noted for the benchmark (BENCH_GC_LOG) ----------------------
_GC_LOG = os.environ.get("BENCH_GC_LOG")
if _GC_LOG:
    import gc

    _gc_started: list[float] = []

    def _gc_note(phase: str, info: dict) -> None:
        if phase == "start":
            _gc_started.append(time.perf_counter())
        elif _gc_started:
            took = time.perf_counter() - _gc_started.pop()
            if info["generation"] == 2 or took > 0.005:
                with open(_GC_LOG, "a") as fh:
                    fh.write(f"{time.time():.3f}\t{info['generation']}\t{took * 1000:.1f}\n")
            if info["generation"] == 2 and took > 0.08:
                _census.set()

    _census = threading.Event()

    def _take_census() -> None:
        """After each long full collection: what the tracked objects are (the last one kept)."""
        import collections

        while True:
            _census.wait()
            _census.clear()
            counts = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
            counts[f"(frozen: {gc.get_freeze_count()})"] = 0
            with open(_GC_LOG + ".census", "w") as fh:
                fh.write(f"total {sum(counts.values())}\n")
                fh.writelines(f"{n}\t{name}\n" for name, n in counts.most_common())
            del counts

    threading.Thread(target=_take_census, daemon=True).start()
    gc.callbacks.append(_gc_note)
