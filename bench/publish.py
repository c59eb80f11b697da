"""What publishing a batch of events costs the publishing process and Redis, two ways side
by side in one process (issue 29):

* **two round trips** (before): ``reserve_seqs`` (a script numbers the batch's sessions) and
  then ``group_send_many`` (a pipeline of PUBLISHes) — still the way for encrypted layers;
* **one round trip**: ``number_and_publish`` (one script numbers and publishes, writing each
  event's numbers over the marks in its JSON).

Batches of 1, 10 and 50 text deltas over 50 sessions (a quiet process sends one event at a
time; hundreds of live runs, tens); the rounds alternate between the two ways. CPU is the
publishing thread's own (``time.thread_time``); a subscriber in another thread receives every
message, so Redis delivers as it does to Daphne. Redis's CPU from ``/proc`` (when Redis runs
on this machine).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import threading
import time
from typing import Any

from .stats import ratio

SIZES = (1, 10, 50)
PAYLOAD = {"message_id": "msg_bench", "part_id": "prt_bench", "offset": 1200, "text": "word "}


def _redis_cpu() -> float | None:
    """redis-server's CPU seconds, or None (not on this machine)."""
    from .env import cpu_seconds

    found = subprocess.run(["pgrep", "-x", "redis-server"], capture_output=True, text=True)
    pids = found.stdout.split()
    return cpu_seconds(int(pids[0])) if pids else None


def _subscriber(url: str, pattern: str, stop: threading.Event) -> threading.Thread:
    import redis

    client = redis.Redis.from_url(url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.psubscribe(pattern)

    def drain() -> None:
        while not stop.is_set():
            pubsub.get_message(timeout=0.2)
        pubsub.close()

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    return thread


async def _measure(quick: bool) -> dict[str, Any]:
    from realtime.channel_layer import PREV_MARK, SEQ_MARK, PipelinedPubSubChannelLayer

    from .env import REDIS_URL

    prefix = "agentplat-bench-publish"
    layer = PipelinedPubSubChannelLayer(hosts=[REDIS_URL], prefix=prefix)
    stop = threading.Event()
    thread = _subscriber(REDIS_URL, f"{prefix}*", stop)
    groups = [f"bench.session.{i}" for i in range(50)]

    def message(group: str, seq: int, prev: int | None) -> tuple[str, dict[str, Any]]:
        event = {"type": "text-delta", "session_id": group, "seq": seq, "prev": prev, **PAYLOAD}
        return group, {"type": "session.event", "text": json.dumps(event), "at": time.time()}

    async def two_trips(batch: list[str]) -> None:
        counts: dict[str, int] = {}
        for group in batch:
            counts[group] = counts.get(group, 0) + 1
        numbers = dict(await layer.reserve_seqs(counts, time.time_ns() // 1000))
        messages = []
        for group in batch:
            prev, seq = numbers[group]
            numbers[group] = (seq, seq + 1)
            messages.append(message(group, seq, prev))
        await layer.group_send_many(messages)

    async def one_trip(batch: list[str]) -> None:
        messages = [message(group, SEQ_MARK, PREV_MARK) for group in batch]
        await layer.number_and_publish(messages, unknown=set(), now_us=time.time_ns() // 1000)

    ways = {"two_round_trips": two_trips, "one_round_trip": one_trip}
    count, rounds = (300, 4) if quick else (1000, 6)
    out: dict[str, Any] = {}
    try:
        for size in SIZES:
            batches = [[groups[(i * size + j) % 50] for j in range(size)] for i in range(count)]
            seen: dict[str, dict[str, list[float]]] = {w: {"cpu": [], "redis": []} for w in ways}
            for r in range(rounds):
                for name in list(ways) if r % 2 else list(reversed(ways)):
                    cpu, redis_cpu = time.thread_time(), _redis_cpu()
                    for batch in batches:
                        await ways[name](batch)
                    events = count * size
                    seen[name]["cpu"].append((time.thread_time() - cpu) * 1e6 / events)
                    after = _redis_cpu()
                    if redis_cpu is not None and after is not None:
                        seen[name]["redis"].append((after - redis_cpu) * 1e6 / events)
            out[str(size)] = {
                name: {
                    "cpu_us_per_event": statistics.median(s["cpu"]),
                    "redis_us_per_event": statistics.median(s["redis"]) if s["redis"] else None,
                }
                for name, s in seen.items()
            }
    finally:
        stop.set()
        thread.join(2)
        await layer.flush()
    return {"sizes": out, "batches": count, "rounds": rounds}


def run(env: Any, quick: bool = False) -> dict[str, Any]:  # noqa: ARG001 - the common signature
    return asyncio.run(_measure(quick))


def report(r: dict[str, Any]) -> str:
    from .__main__ import _f, _table

    rows = []
    for size, ways in r["sizes"].items():
        before = ways["two_round_trips"]
        for name, label in (("two_round_trips", "two round trips"), ("one_round_trip", "one")):
            s = ways[name]
            rows.append(
                [
                    f"batches of {size}: {label}",
                    _f(s["cpu_us_per_event"]),
                    _f(s["redis_us_per_event"]) if s["redis_us_per_event"] is not None else "n/a",
                    f"{_f(ratio(s['cpu_us_per_event'], before['cpu_us_per_event']), 2)}x"
                    if name == "one_round_trip"
                    else "-",
                ]
            )
    return _table(
        "Publishing events: the publisher's CPU and Redis's, per event",
        ["", "publisher µs", "Redis µs", "publisher, one / two"],
        rows,
        f"{r['batches']} batches a round, {r['rounds']} rounds alternating, medians; a "
        "subscriber in another thread receives every message.",
    )
