"""Load (issue 7), loopback only, bounded. Services mode: Daphne and a Celery worker pool.

1. 50 sessions stream scripted runs at once (the streaming scenario: delta latency from the
   worker's emit to the client) while 200 more websocket clients listen on those sessions and
   an API client reads ``GET …/messages/`` of a 2,000-message session over and over: runs/s,
   deltas/s, p50/p99 delta latency, the API's p50/p99, errors.
2. 100 prompts sent at once to one session: under ``reject`` exactly one runs, 99 get 409;
   under ``enqueue`` all 100 run, one at a time, in the order they were accepted.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .env import Env
from .stats import percentile
from .streaming import Client, _script, _wait_runs, scenario

LISTENERS = 200
PROMPTS = 100
PACE_MS = 20  # 50 tokens a second, as the 50-session streaming scenario


async def _api_probe(port: int, token: str, session_id: str, stop: asyncio.Event) -> dict:
    import httpx

    latencies, errors, sizes = [], 0, set()
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Token {token}"}
    ) as http:
        while not stop.is_set():
            started = time.perf_counter()
            response = await http.get(f"/api/sessions/{session_id}/messages/", timeout=60)
            latencies.append((time.perf_counter() - started) * 1000.0)
            if response.status_code != 200:
                errors += 1
            else:
                sizes.add(len(response.json()["results"]))
    return {
        "requests": len(latencies),
        "errors": errors,
        "messages": sorted(sizes),
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
    }


async def _listen(port: int, token: str, sessions: list[Any]) -> tuple[list[Client], list]:
    clients = [
        Client(f"ws://127.0.0.1:{port}/ws/sessions/{sessions[i % len(sessions)].id}/?token={token}")
        for i in range(LISTENERS)
    ]
    tasks = [asyncio.create_task(c.run()) for c in clients]
    await asyncio.wait_for(asyncio.gather(*(c.subscribed.wait() for c in clients)), 120)
    return clients, tasks


async def _loaded(
    port: int, token: str, sessions: list[Any], user: Any, big: Any, tokens: int, procs: dict
) -> dict:
    listeners, listener_tasks = await _listen(port, token, sessions)
    stop = asyncio.Event()
    probe = asyncio.create_task(_api_probe(port, token, big.id, stop))
    started = time.time()
    streamed = await scenario(
        port=port,
        token=token,
        sessions=sessions,
        user=user,
        tokens=tokens,
        pace_ms=PACE_MS,
        **procs,
    )
    elapsed = time.time() - started
    stop.set()
    api = await probe
    results = await asyncio.gather(*listener_tasks, return_exceptions=True)
    ws_errors = sum(1 for r in results if isinstance(r, BaseException))
    listener_frames = sum(len(c.frames) for c in listeners)
    return {
        "sessions": len(sessions),
        "listeners": LISTENERS,
        "runs_per_s": len(sessions) / elapsed,
        "seconds": elapsed,
        "deltas_per_s_produced": streamed["produced_tokens_per_s"],
        "deltas_per_s_delivered": streamed["delivered_tokens_per_s"],
        "delta_p50_ms": streamed["p50_ms"],
        "delta_p99_ms": streamed["p99_ms"],
        "lost": streamed["lost"],
        "listener_frames": listener_frames,
        "listener_errors": ws_errors,
        "api": api,
        "errors": api["errors"] + ws_errors + streamed["lost"],
    }


async def _burst(port: int, token: str, session_id: str, strategy: str) -> dict:
    import httpx

    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Token {token}"},
        limits=httpx.Limits(max_connections=PROMPTS),
        timeout=120,
    ) as http:

        async def post(i: int) -> httpx.Response:
            body = {
                "messages": [{"role": "user", "content": f"say prompt {i}"}],
                "multitask_strategy": strategy,
            }
            return await http.post(f"/api/sessions/{session_id}/runs/", json=body)

        responses = await asyncio.gather(*(post(i) for i in range(PROMPTS)))
    codes: dict[int, int] = {}
    for r in responses:
        codes[r.status_code] = codes.get(r.status_code, 0) + 1
    return {
        "codes": codes,
        "run_ids": [r.json()["id"] for r in responses if r.status_code == 202],
    }


def _serial(run_ids: list[str]) -> dict:
    """Whether the runs ran one at a time, in the order they were accepted (by id)."""
    from runs_app.models import Run

    runs = sorted(Run.objects.filter(id__in=run_ids), key=lambda r: r.started_at)
    overlaps = sum(1 for a, b in zip(runs, runs[1:], strict=False) if b.started_at < a.finished_at)
    in_order = [r.id for r in runs] == sorted(run_ids)
    return {
        "runs": len(runs),
        "completed": sum(1 for r in runs if r.status == "completed"),
        "overlaps": overlaps,
        "in_order": in_order,
    }


def run(env: Env, *, quick: bool) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.db import close_old_connections
    from rest_framework.authtoken.models import Token

    from runs_app.services.runs import start_run
    from runs_app.services.seed import seed_runs
    from sessions_app.services.sessions import create_session

    emit_dir = env.workdir / "emit-load"
    emit_dir.mkdir(exist_ok=True)
    sessions_n = 50
    daphne, port = env.daphne()
    # The worker as the streaming benchmark starts it (and platform/Procfile): one process
    # whose run host carries every run.
    worker = env.worker(4, app="bench.worker", pool="threads", BENCH_EMIT_DIR=str(emit_dir))
    try:
        user = User.objects.create_user("bench-load", password="x")
        token = Token.objects.create(user=user).key
        many = [create_session(owner=user, title=f"load {i}") for i in range(sessions_n)]
        warm = [
            start_run(session=s, user=user, messages=[{"role": "user", "content": _script(5, 5)}])
            for s in many
        ]
        _wait_runs([r.id for r in warm], 180)
        big = seed_runs(create_session(owner=user, title="2,000 messages"), 667)
        close_old_connections()
        tokens = 100 if quick else 250
        procs = {
            "emit_dir": emit_dir,
            "worker_pid": worker.pid,
            "daphne_pid": daphne.pid,
            "child_env": env.child_env(),
        }
        loaded = asyncio.run(_loaded(port, token, many, user, big, tokens, procs))
        one = create_session(owner=user, title="burst reject")
        reject = asyncio.run(_burst(port, token, one.id, "reject"))
        _wait_runs(reject["run_ids"], 120)
        # A "say" run ends in a fraction of a second, before the last of the 100 requests is
        # admitted (they take turns, RUN_ADMISSIONS_AT_ONCE): each one admitted found the
        # session idle again. None may overlap another.
        reject["serial"] = _serial(reject["run_ids"])
        two = create_session(owner=user, title="burst enqueue")
        enqueue = asyncio.run(_burst(port, token, two.id, "enqueue"))
        _wait_runs(enqueue["run_ids"], 600)
        enqueue["serial"] = _serial(enqueue["run_ids"])
        close_old_connections()
        return {"loaded": loaded, "reject": reject, "enqueue": enqueue, "tokens": tokens}
    finally:
        daphne.stop()
        worker.stop()


def report(r: dict[str, Any]) -> str:
    from .__main__ import _f

    ld, rej, enq = r["loaded"], r["reject"], r["enqueue"]
    serial = enq["serial"]
    return "\n".join(
        [
            f"Load: {ld['sessions']} sessions streaming {r['tokens']} tokens each + "
            f"{ld['listeners']} more websocket clients + an API reader of a 2,000-message session",
            f"  runs/s {_f(ld['runs_per_s'], 2)} over {_f(ld['seconds'])} s; deltas/s produced "
            f"{_f(ld['deltas_per_s_produced'])}, delivered {_f(ld['deltas_per_s_delivered'])}; "
            f"delta latency p50 {_f(ld['delta_p50_ms'])} ms, p99 {_f(ld['delta_p99_ms'])} ms",
            f"  GET …/messages/ ({ld['api']['messages']} messages): {ld['api']['requests']} "
            f"requests, p50 {_f(ld['api']['p50_ms'])} ms, p99 {_f(ld['api']['p99_ms'])} ms; "
            f"listener frames {ld['listener_frames']:,}; errors {ld['errors']} "
            f"(lost deltas {ld['lost']}, API {ld['api']['errors']}, websockets "
            f"{ld['listener_errors']})",
            f"{PROMPTS} prompts at once on one session: reject → {rej['codes']} "
            f"({rej['serial']['overlaps']} of the admitted overlapping); enqueue → "
            f"{enq['codes']}, {serial['completed']}/{serial['runs']} completed, "
            f"{serial['overlaps']} overlapping, in acceptance order: {serial['in_order']}",
        ]
    )
