"""Streaming latency: a token emitted by the model in a Celery worker → a websocket client.

Services mode, real processes: Daphne and a Celery worker started as subprocesses
(``bench.worker``: the project's app with a probe that notes when the engine hands each delta
to the publisher). The clients live in this process and note when each frame arrives; a frame
carries several deltas of one part from ``offset`` on, so every delta it covers gets its own
latency ``received - emitted``. Both clocks are this machine's ``time.time()``.

The floor: one Redis PUBLISH → subscriber round trip on loopback, measured in the same run.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import time
from pathlib import Path
from typing import Any

from .env import REDIS_URL, VENV_BIN, Env
from .stats import percentile, ratio

PACE_MS = 20  # 50 tokens/s per session
TERMINAL = {"completed", "error", "cancelled", "paused"}


# -- the floor ------------------------------------------------------------------------------
async def redis_floor(samples: int) -> dict[str, float]:
    import redis.asyncio as aioredis

    pub = aioredis.from_url(REDIS_URL)
    sub_conn = aioredis.from_url(REDIS_URL)
    pubsub = sub_conn.pubsub()
    channel = "agentplat-bench-floor"
    await pubsub.subscribe(channel)
    await pubsub.get_message(timeout=1.0)  # the subscribe confirmation
    payload = json.dumps(
        {
            "type": "text-delta",
            "session_id": "ses_" + "0" * 26,
            "seq": 1,
            "message_id": "msg_" + "0" * 26,
            "part_id": "prt_" + "0" * 26,
            "offset": 0,
            "text": " t1 t2",
        }
    )
    times = []
    for i in range(samples + 50):
        start = time.perf_counter()
        await pub.publish(channel, payload)
        while True:
            msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if msg is not None:
                break
        if i >= 50:  # warm-up
            times.append((time.perf_counter() - start) * 1000.0)
    await pubsub.unsubscribe(channel)
    await pubsub.aclose()
    await pub.aclose()
    await sub_conn.aclose()
    return {
        "p50_ms": percentile(times, 50),
        "p99_ms": percentile(times, 99),
        "samples": len(times),
    }


# -- the clients -----------------------------------------------------------------------------
class Client:
    def __init__(self, url: str) -> None:
        self.url = url
        self.frames: list[tuple[float, str, int, int]] = []  # received, part, offset, length
        self.subscribed = asyncio.Event()
        self.done = asyncio.Event()
        self.other_events = 0

    async def run(self) -> None:
        from websockets.asyncio.client import connect

        async with connect(self.url, max_size=None, ping_interval=None) as ws:
            async for raw in ws:
                received = time.time()
                event = json.loads(raw)
                kind = event.get("type")
                if kind == "text-delta":
                    self.frames.append(
                        (received, event["part_id"], event["offset"], len(event["text"]))
                    )
                elif kind == "subscribed":
                    self.subscribed.set()
                elif kind == "run.updated" and event["run"]["status"] in TERMINAL:
                    self.done.set()
                    return
                else:
                    self.other_events += 1


def read_emits(emit_dir: Path, since: float) -> list[tuple[float, str, int, int]]:
    out = []
    for path in emit_dir.glob("emit-*.tsv"):
        for line in path.read_text().splitlines():
            t, part, off, n = line.split("\t")
            if float(t) >= since:
                out.append((float(t), part, int(off), int(n)))
    return out


def latencies(
    emits: list[tuple[float, str, int, int]], frames: list[tuple[float, str, int, int]]
) -> tuple[list[float], int]:
    """Per emitted delta, ms from emission to the arrival of the frame that covers its
    offset; and how many deltas no frame covered (lost)."""
    by_part: dict[str, list[tuple[int, int, float]]] = {}
    for received, part, offset, length in frames:
        by_part.setdefault(part, []).append((offset, offset + length, received))
    starts: dict[str, list[int]] = {}
    for part, spans in by_part.items():
        spans.sort()
        starts[part] = [s[0] for s in spans]
    out, lost = [], 0
    for emitted, part, offset, _length in emits:
        spans = by_part.get(part)
        if not spans:
            lost += 1
            continue
        i = bisect.bisect_right(starts[part], offset) - 1
        if i < 0 or not (spans[i][0] <= offset < spans[i][1]):
            lost += 1
            continue
        out.append((spans[i][2] - emitted) * 1000.0)
    return out, lost


# -- one scenario ---------------------------------------------------------------------------
def _script(tokens: int) -> str:
    return f"pace {PACE_MS}\nsay " + " ".join(f"t{i}" for i in range(tokens))


async def scenario(
    *, port: int, token: str, sessions: list[Any], user: Any, tokens: int, emit_dir: Path
) -> dict[str, Any]:
    from django.db import close_old_connections

    from runs_app.services.runs import start_run

    clients = [Client(f"ws://127.0.0.1:{port}/ws/sessions/{s.id}/?token={token}") for s in sessions]
    tasks = [asyncio.create_task(c.run()) for c in clients]
    await asyncio.wait_for(asyncio.gather(*(c.subscribed.wait() for c in clients)), 60)
    await asyncio.sleep(0.3)
    script = _script(tokens)

    def start_all() -> None:
        for s in sessions:
            start_run(session=s, user=user, messages=[{"role": "user", "content": script}])
        close_old_connections()

    since = time.time()
    await asyncio.to_thread(start_all)
    started = time.time() - since
    timeout = tokens * PACE_MS / 1000.0 * 3 + 60
    await asyncio.wait_for(asyncio.gather(*(c.done.wait() for c in clients)), timeout)
    for task in tasks:
        await task
    await asyncio.sleep(0.6)  # the probe writes its notes every 100 ms
    emits = read_emits(emit_dir, since)
    frames = [f for c in clients for f in c.frames]
    lat, lost = latencies(emits, frames)
    emit_times = [e[0] for e in emits]
    recv_times = [f[0] for f in frames]
    delivered_tokens = len(emits) - lost
    produced_rate = len(emits) / (max(emit_times) - min(emit_times)) if len(emit_times) > 1 else 0.0
    delivered_rate = (
        delivered_tokens / (max(recv_times) - min(recv_times)) if len(recv_times) > 1 else 0.0
    )
    return {
        "sessions": len(sessions),
        "tokens_per_session": tokens,
        "target_tokens_per_s": len(sessions) * 1000.0 / PACE_MS,
        "emitted": len(emits),
        "delivered": delivered_tokens,
        "lost": lost,
        "frames": len(frames),
        "p50_ms": percentile(lat, 50),
        "p90_ms": percentile(lat, 90),
        "p99_ms": percentile(lat, 99),
        "max_ms": max(lat) if lat else float("nan"),
        "produced_tokens_per_s": produced_rate,
        "delivered_tokens_per_s": delivered_rate,
        "enqueue_seconds": started,
    }


def _wait_runs(run_ids: list[str], timeout: float) -> None:
    from runs_app.models import Run

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = Run.objects.filter(id__in=run_ids).exclude(status__in=list(TERMINAL)).count()
        if not left:
            return
        time.sleep(0.2)
    raise RuntimeError(f"warm-up runs did not finish in {timeout}s")


def run(env: Env, *, quick: bool, sessions: int, pool: str) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.db import close_old_connections
    from rest_framework.authtoken.models import Token

    from runs_app.services.runs import start_run
    from sessions_app.services.sessions import create_session

    emit_dir = env.workdir / "emit"
    emit_dir.mkdir(exist_ok=True)
    daphne, port = env.daphne()
    worker = env.worker(sessions, app="bench.worker", pool=pool, BENCH_EMIT_DIR=str(emit_dir))
    try:
        user = User.objects.create_user("bench-stream", password="x")
        token = Token.objects.create(user=user).key
        many = [create_session(owner=user, title=f"stream {i}") for i in range(sessions)]
        # Warm-up: every pool child imports the engine and runs once; discarded.
        warm = [
            start_run(session=s, user=user, messages=[{"role": "user", "content": _script(10)}])
            for s in many
        ]
        _wait_runs([r.id for r in warm], 180)
        close_old_connections()
        tokens = 250 if quick else 500
        floor = asyncio.run(redis_floor(1000 if quick else 3000))
        one = asyncio.run(
            scenario(
                port=port,
                token=token,
                sessions=many[:1],
                user=user,
                tokens=tokens,
                emit_dir=emit_dir,
            )
        )
        fifty = asyncio.run(
            scenario(
                port=port,
                token=token,
                sessions=many,
                user=user,
                tokens=tokens,
                emit_dir=emit_dir,
            )
        )
        close_old_connections()
        return {
            "daphne_pid": daphne.pid,
            "worker": {"pool": pool, "concurrency": sessions, "app": "bench.worker"},
            "frame_ms": _frame_ms(),
            "pace_ms": PACE_MS,
            "floor": floor,
            "one": one,
            "many": fifty,
            "ratio_p50_one": ratio(one["p50_ms"], floor["p50_ms"]),
            "ratio_p99_one": ratio(one["p99_ms"], floor["p99_ms"]),
            "ratio_p50_many": ratio(fifty["p50_ms"], floor["p50_ms"]),
            "ratio_p99_many": ratio(fifty["p99_ms"], floor["p99_ms"]),
            "command": f"{VENV_BIN}/celery -A bench.worker worker -c {sessions} --pool {pool} "
            "--prefetch-multiplier 1 -l warning; "
            "daphne -b 127.0.0.1 -p PORT config.asgi:application",
        }
    finally:
        daphne.stop()
        worker.stop()


def _frame_ms() -> float:
    from django.conf import settings

    return settings.STREAM_FRAME_MS
