"""Streaming: a token emitted by the model in a worker → a websocket client, with many live runs.

Services mode, real processes: Daphne and a Celery worker started as subprocesses
(``bench.worker``: the project's app with a probe that notes when the engine hands each delta
to the publisher). The clients live in this process and note when each frame arrives; a frame
carries several deltas of one part from ``offset`` on, so every delta it covers gets its own
latency ``received - emitted``. Both clocks are this machine's ``time.time()``.

Scenarios (one Daphne, one worker process):

* 1 session × 50 tok/s, 50 sessions × 50 tok/s and 500 sessions × 10 tok/s, on the current
  worker: one process whose run host carries every run (``--pool threads -c 4``);
* 50 sessions × 50 tok/s on the **old worker**, side by side in the same run: the commit
  before the run host, checked out in a git worktree, one prefork process per live run
  (``-c 50``), against the same database and Redis.

Per scenario: latency p50/p99 (emit → browser), produced tokens/s (each session's tokens over
its own streaming time, summed: does the worker keep the pace it was asked for?), delivered =
emitted − lost, CPU µs per token in the worker and in Daphne (from /proc, no profiler on),
and the worker's peak RSS. Then a profiled repeat of the 50-session scenario gives where the
worker's remaining per-token time goes (cProfile on the host's loop thread).

The floor: one Redis PUBLISH → subscriber round trip on loopback, measured in the same run.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import gc
import json
import os
import pstats
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .env import (
    METRICS_TOKEN,
    REDIS_URL,
    ROOT,
    VENV_BIN,
    Env,
    cpu_seconds,
    tree_total_rss_mib,
)
from .stats import percentile, ratio

RESULTS = Path(__file__).resolve().parent / "results"
TERMINAL = {"completed", "error", "cancelled"}
# The last commit whose worker ran one run per prefork process (before runs_app/execution/host.py).
OLD_WORKER_COMMIT = "182882712a4c968a754c62745dde189de5378c25"
OLD_WORKER_DIR = ROOT / "bench" / ".old-worker"


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
    def __init__(self, url: str, session_id: str = "") -> None:
        self.url = url
        self.session_id = session_id
        # received, part, offset, length, published (the event's ``seq``: the publishing
        # process's clock in µs when it sent the event to Redis; 0 where it is not one)
        self.frames: list[tuple[float, str, int, int, float]] = []
        self.subscribed = asyncio.Event()
        self.done = asyncio.Event()

    async def run(self) -> None:
        from websockets.asyncio.client import connect

        async with connect(self.url, max_size=None, ping_interval=None, open_timeout=60) as ws:
            async for raw in ws:
                received = time.time()
                event = json.loads(raw)
                kind = event.get("type")
                if kind == "text-delta":
                    seq = event.get("seq") or 0
                    published = seq / 1e6 if seq > 1e15 else 0.0  # an older worker's counter
                    self.frames.append(
                        (received, event["part_id"], event["offset"], len(event["text"]), published)
                    )
                elif kind == "subscribed":
                    self.subscribed.set()
                elif kind == "run.updated" and event["run"]["status"] in TERMINAL:
                    self.done.set()
                    return


def read_emits(emit_dir: Path, since: float) -> list[tuple[float, str, int, int]]:
    out = []
    for path in emit_dir.glob("emit-*.tsv"):
        for line in path.read_text().splitlines():
            t, part, off, n = line.split("\t")
            if float(t) >= since:
                out.append((float(t), part, int(off), int(n)))
    return out


def latencies(
    emits: list[tuple[float, str, int, int]],
    frames: list[tuple[float, str, int, int, float]],
    timed: list[tuple[float, float]] | None = None,
    in_worker: list[tuple[float, float]] | None = None,
) -> tuple[list[float], int]:
    """Per emitted delta, ms from emission to the arrival of the frame that covers its
    offset; and how many deltas no frame covered (lost). ``timed`` gets (emitted, ms);
    ``in_worker`` (emitted, ms from emission to the frame's publication to Redis): the part
    of the latency spent in the worker (the frame, the loop, the sender), the rest being
    Redis, Daphne and the client."""
    by_part: dict[str, list[tuple[int, int, float, float]]] = {}
    for received, part, offset, length, published in frames:
        by_part.setdefault(part, []).append((offset, offset + length, received, published))
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
        if timed is not None:
            timed.append((emitted, out[-1]))
        if in_worker is not None and spans[i][3]:
            in_worker.append((emitted, (spans[i][3] - emitted) * 1000.0))
    return out, lost


def produced_rate(emits: list[tuple[float, str, int, int]]) -> float:
    """Each part's (session's) tokens over its own streaming time, summed: the rate the worker
    sustained while the runs streamed, whatever the spread of their start times."""
    by_part: dict[str, list[float]] = {}
    for t, part, _off, _n in emits:
        by_part.setdefault(part, []).append(t)
    total = 0.0
    for times in by_part.values():
        if len(times) > 1:
            total += (len(times) - 1) / (max(times) - min(times))
    return total


def _p99_by_second(points: list[tuple[float, float]], first: float) -> list[int]:
    """p99 of the (time, ms) ``points`` in each second from ``first`` on."""
    by_second: dict[int, list[float]] = {}
    for t, ms in points:
        by_second.setdefault(int(t - first), []).append(ms)
    return [round(percentile(v, 99)) for _, v in sorted(by_second.items())]


def _script(tokens: int, pace_ms: int) -> str:
    return f"pace {pace_ms}\nsay " + " ".join(f"t{i}" for i in range(tokens))


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU of the machine so far (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def cpu_by_command() -> dict[str, float]:
    """CPU seconds so far of every process on the machine, summed by command name; the CPU
    of children a process has waited for (git under the worker, backends under PostgreSQL)
    goes under "<name> children"."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        own = (int(fields[11]) + int(fields[12])) / ticks
        waited = (int(fields[13]) + int(fields[14])) / ticks
        out[name] = out.get(name, 0.0) + own
        out[f"{name} children"] = out.get(f"{name} children", 0.0) + waited
    return out


_FANOUT = "agentplat_event_fanout_seconds_bucket"


def fanout_buckets(port: int) -> dict[float, float]:
    """Daphne's fan-out histogram so far (``GET /metrics``): cumulative count of events by
    upper bound in seconds, from an event's hand-over by its publisher to its consumer's send
    to the socket (the worker's sender, Redis and Daphne; not the client)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        text = response.read().decode()
    out: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(_FANOUT + "{"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            out[float("inf") if bound == "+Inf" else float(bound)] = float(line.rsplit(" ", 1)[1])
    return out


def fanout_by_second(
    snapshots: list[tuple[float, dict[float, float]]], first: float
) -> list[tuple[int, int, float]]:
    """Per second from ``first`` on, from successive histogram snapshots: (second, the bucket
    bound in ms the p99 lies under, % of events over 50 ms)."""
    out = []
    for (_t0, before), (t1, after) in zip(snapshots, snapshots[1:], strict=False):
        counts = sorted((b, after.get(b, 0.0) - before.get(b, 0.0)) for b in after)
        total = counts[-1][1] if counts else 0.0
        if total <= 0 or t1 < first:
            continue
        bound = next(b for b, c in counts if c >= 0.99 * total)
        within = next((c for b, c in counts if b >= 0.05), total)
        out.append((int(t1 - first), round(bound * 1000), round(100 * (1 - within / total), 1)))
    return out


class Peak:
    """The peak of the worker's RSS (its whole process tree) while a scenario runs, how busy
    the whole machine was, second by second (every core: 1.0 = all of them), and Daphne's
    fan-out histogram each second (``port``: Daphne's)."""

    def __init__(self, pid: int, port: int = 0) -> None:
        self.pid, self.port, self.mib, self._stop = pid, port, 0.0, threading.Event()
        self.busy: list[float] = []
        self.fanout: list[tuple[float, dict[float, float]]] = []
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _scrape(self) -> None:
        if self.port:
            with contextlib.suppress(OSError, ValueError):
                self.fanout.append((time.time(), fanout_buckets(self.port)))

    def _watch(self) -> None:
        last, tick = _machine_ticks(), time.monotonic()
        self._scrape()
        while not self._stop.wait(0.25):
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                self.mib = max(self.mib, tree_total_rss_mib(self.pid))
            if time.monotonic() - tick >= 1.0:
                now = _machine_ticks()
                self.busy.append((now[0] - last[0]) / max(1, now[1] - last[1]))
                last, tick = now, time.monotonic()
                self._scrape()

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def loop_lag(points: list[tuple[float, float]], stop: asyncio.Event) -> None:
    """How late this process's loop (the websocket clients') wakes from a 10 ms sleep: (time,
    ms late) — a frame that arrived meanwhile was read that much late."""
    while not stop.is_set():
        asked = time.monotonic()
        await asyncio.sleep(0.01)
        points.append((time.time(), (time.monotonic() - asked - 0.01) * 1000.0))


# -- one scenario ---------------------------------------------------------------------------
async def scenario(
    *,
    port: int,
    token: str,
    sessions: list[Any],
    user: Any,
    tokens: int,
    pace_ms: int,
    emit_dir: Path,
    worker_pid: int,
    daphne_pid: int,
    child_env: dict[str, str],
) -> dict[str, Any]:
    clients = [
        Client(f"ws://127.0.0.1:{port}/ws/sessions/{s.id}/?token={token}", s.id) for s in sessions
    ]
    tasks = [asyncio.create_task(c.run()) for c in clients]
    await asyncio.wait_for(asyncio.gather(*(c.subscribed.wait() for c in clients)), 120)
    await asyncio.sleep(0.5)
    script = _script(tokens, pace_ms)

    # The runs are asked for through the web process's API, all at once, from a process of
    # its own (bench/start_runs.py: the browsers pressing Send), set up before the clock
    # starts; a session of its own at the default CPU weight (bench/env.py).
    starter = await asyncio.create_subprocess_exec(
        str(VENV_BIN / "python"),
        "-m",
        "bench.start_runs",
        cwd=str(ROOT),
        env=child_env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert starter.stdout is not None
    if (await asyncio.wait_for(starter.stdout.readline(), 60)).strip() != b"ready":
        raise RuntimeError("bench.start_runs did not start")

    requests: dict[str, Any] = {}  # when each request was sent and answered, and its status

    async def start_all() -> None:
        order = {
            "url": f"http://127.0.0.1:{port}",
            "token": token,
            "session_ids": [s.id for s in sessions],
            "content": script,
        }
        out, _ = await starter.communicate(json.dumps(order).encode() + b"\n")
        if starter.returncode:
            raise RuntimeError(f"bench.start_runs failed ({starter.returncode})")
        requests.update(json.loads(out.splitlines()[-1]))
        refused = {sid: code for sid, code in requests["status"].items() if code != 202}
        if refused:
            raise RuntimeError(f"runs refused by the API: {refused}")

    # Daphne's first HTTP request imports its URL conf (~100 ms of its loop): before the clock.
    with contextlib.suppress(OSError, ValueError):
        fanout_buckets(port)
    cpu_worker, cpu_daphne = cpu_seconds(worker_pid), cpu_seconds(daphne_pid)
    own = os.times()
    cpu_clients = own.user + own.system
    by_command = cpu_by_command()
    since = time.time()
    # The clients keep every frame they read (300,000 at 500 sessions): the collector's full
    # passes over them stopped this process's reading for up to 300 ms, a pause of the
    # instrument, not of the server. No collection while the scenario runs.
    gc.disable()
    lag: list[tuple[float, float]] = []
    stop_lag = asyncio.Event()
    lag_task = asyncio.create_task(loop_lag(lag, stop_lag))
    try:
        with Peak(worker_pid, port) as peak:
            await start_all()
            started = time.time() - since
            timeout = tokens * pace_ms / 1000.0 * 3 + 120
            await asyncio.wait_for(asyncio.gather(*(c.done.wait() for c in clients)), timeout)
    finally:
        stop_lag.set()
        await lag_task
        gc.enable()
    cpu_worker = cpu_seconds(worker_pid) - cpu_worker
    cpu_daphne = cpu_seconds(daphne_pid) - cpu_daphne
    own = os.times()
    cpu_clients = own.user + own.system - cpu_clients
    elapsed = time.time() - since
    after = cpu_by_command()
    shares = {
        name: (after[name] - by_command.get(name, 0.0)) / max(1e-9, elapsed) for name in after
    }
    top_shares = {n: round(v, 3) for n, v in sorted(shares.items(), key=lambda kv: -kv[1])[:8]}
    # What each run cost each process, start to end (with one token each, the "starts"
    # scenario: what a run's start and end cost; "python" is the benchmark's clients and
    # browsers, "<name> children" what a process waited for, e.g. git under the worker).
    per_run = {
        name: (after[name] - by_command.get(name, 0.0)) * 1000.0 / len(sessions) for name in after
    }
    cpu_ms_per_run = {
        n: round(v, 2) for n, v in sorted(per_run.items(), key=lambda kv: -kv[1])[:8] if v > 0
    }
    for task in tasks:
        await task
    await asyncio.sleep(0.6)  # the probe writes its notes every 100 ms
    emits = read_emits(emit_dir, since)
    frames = [f for c in clients for f in c.frames]
    timed: list[tuple[float, float]] = []
    in_worker: list[tuple[float, float]] = []
    lat, lost = latencies(emits, frames, timed, in_worker)
    first = min(t for t, _ in timed) if timed else since
    # While the runs start (their start-up work: history, first rows, a snapshot) and after.
    starting = [ms for t, ms in timed if t < first + 3.0]
    steady = [ms for t, ms in timed if t >= first + 3.0]
    # p99 per second of the scenario: where in the run the tail is (start-up, steady, end);
    # the same of the time each token spent in the worker before its frame left for Redis.
    timeline = _p99_by_second(timed, first)
    worker_timeline = _p99_by_second(in_worker, first)
    lag_timeline = _p99_by_second(lag, first)
    fanout_timeline = fanout_by_second(peak.fanout, first)
    first_emits: dict[str, float] = {}
    last_emits: dict[str, float] = {}
    for t, part, _off, _n in emits:
        first_emits[part] = min(t, first_emits.get(part, t))
        last_emits[part] = max(t, last_emits.get(part, t))
    # Every run streaming at once: from the last run's first token to the first run's last.
    all_from = max(first_emits.values()) if first_emits else 0.0
    all_to = min(last_emits.values()) if last_emits else 0.0
    together = [ms for t, ms in timed if all_from <= t <= all_to]
    recv_times = [f[0] for f in frames]
    # Time to the first token, as each browser sees it: from its request to its first frame.
    ttft = [
        (c.frames[0][0] - requests["sent"][c.session_id]) * 1000.0
        for c in clients
        if c.frames and c.session_id in requests.get("sent", {})
    ]
    answers = [
        (requests["answered"][sid] - requests["sent"][sid]) * 1000.0
        for sid in requests.get("answered", {})
    ]
    delivered_tokens = len(emits) - lost
    asked = len(sessions) * 1000.0 / pace_ms
    produced = produced_rate(emits)
    return {
        "sessions": len(sessions),
        "tokens_per_session": tokens,
        "pace_ms": pace_ms,
        "target_tokens_per_s": asked,
        "emitted": len(emits),
        "delivered": delivered_tokens,
        "lost": lost,
        "frames": len(frames),
        "p50_ms": percentile(lat, 50),
        "p90_ms": percentile(lat, 90),
        "p99_ms": percentile(lat, 99),
        "max_ms": max(lat) if lat else float("nan"),
        "p99_first_3s_ms": percentile(starting, 99) if starting else float("nan"),
        "p99_after_3s_ms": percentile(steady, 99) if steady else float("nan"),
        "p99_by_second_ms": timeline,
        "p99_in_worker_by_second_ms": worker_timeline,
        # Daphne's side, from its fan-out histogram: (second, p99 under this bound in ms, %
        # of events over 50 ms); and the clients' loop lag, p99 by second.
        "fanout_by_second": fanout_timeline,
        "clients_loop_lag_p99_by_second_ms": lag_timeline,
        "all_streaming_s": max(0.0, all_to - all_from),
        "p99_all_streaming_ms": percentile(together, 99) if together else float("nan"),
        "p50_all_streaming_ms": percentile(together, 50) if together else float("nan"),
        "tokens_all_streaming": len(together),
        "produced_tokens_per_s": produced,
        "produced_share": produced / asked if asked else float("nan"),
        "delivered_tokens_per_s": (
            delivered_tokens / (max(recv_times) - min(recv_times)) if len(recv_times) > 1 else 0.0
        ),
        "enqueue_seconds": started,
        "ttft_p50_ms": percentile(ttft, 50) if ttft else float("nan"),
        "ttft_p99_ms": percentile(ttft, 99) if ttft else float("nan"),
        "ttft_max_ms": max(ttft) if ttft else float("nan"),
        "api_answer_p50_ms": percentile(answers, 50) if answers else float("nan"),
        "api_answer_p99_ms": percentile(answers, 99) if answers else float("nan"),
        "browsers_cpu_ms_per_run": requests.get("cpu_s", 0.0) / len(sessions) * 1000,
        "worker_cpu_us_per_token": cpu_worker / max(1, len(emits)) * 1e6,
        "daphne_cpu_us_per_token": cpu_daphne / max(1, len(emits)) * 1e6,
        "worker_cpu_share": cpu_worker / max(1e-9, elapsed),
        "daphne_cpu_share": cpu_daphne / max(1e-9, elapsed),
        # The benchmark's own process: its websocket clients (bench/start_runs.py, which
        # starts the runs, is a process of its own: under "python" in the shares by command).
        "clients_cpu_share": cpu_clients / max(1e-9, elapsed),
        "elapsed_s": elapsed,
        "cpu_share_by_command": top_shares,
        "cpu_ms_per_run_by_command": cpu_ms_per_run,
        # From the first run's first token to the last run's first token.
        "first_token_spread_s": (
            max(first_emits.values()) - min(first_emits.values()) if first_emits else 0.0
        ),
        "worker_peak_rss_mib": peak.mib,
        "machine_busy_by_second": [round(b, 2) for b in peak.busy],
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


def _old_worker_tree() -> Path:
    """The old worker's code, checked out once beside the project (git worktree)."""
    head = OLD_WORKER_DIR / ".git"
    if head.exists():
        current = subprocess.run(
            ["git", "-C", str(OLD_WORKER_DIR), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        if current == OLD_WORKER_COMMIT:
            return OLD_WORKER_DIR
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(OLD_WORKER_DIR)],
            check=False,
        )
    subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], check=False)
    subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "worktree",
            "add",
            "--detach",
            "--force",
            str(OLD_WORKER_DIR),
            OLD_WORKER_COMMIT,
        ],
        check=True,
        capture_output=True,
    )
    return OLD_WORKER_DIR


def _profile(profile_dir: Path, order: str, timeout: float = 10.0) -> None:
    (profile_dir / "cmd").write_text(order)
    deadline = time.monotonic() + timeout
    while (profile_dir / "cmd").exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def _top_functions(path: Path, tokens: int, limit: int = 12) -> list[dict[str, Any]]:
    """The host loop's own time per function, in µs per token (cProfile's tottime)."""
    stats = pstats.Stats(str(path))
    rows = []
    for (filename, line, name), (_cc, _nc, tottime, _cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        short = filename.replace(str(ROOT) + "/", "")
        if "site-packages/" in short:
            short = short.split("site-packages/", 1)[1]
        rows.append({"function": f"{short}:{line}({name})", "us_per_token": tottime / tokens * 1e6})
    rows.sort(key=lambda r: -r["us_per_token"])
    total = sum(r["us_per_token"] for r in rows)
    return [{"total_us_per_token": total}, *rows[:limit]]


@contextlib.contextmanager
def _spied(worker_pid: int, daphne_pid: int, label: str) -> Iterator[None]:
    """With BENCH_PYSPY=1: py-spy samples the worker and Daphne (the thread that holds the
    GIL) while the scenario runs; the collapsed stacks go to bench/results/."""
    if os.environ.get("BENCH_PYSPY") != "1":
        yield
        return
    RESULTS.mkdir(exist_ok=True)
    spies = [
        subprocess.Popen(
            [
                f"{VENV_BIN}/py-spy",
                "record",
                "--pid",
                str(pid),
                "--rate",
                "250",
                "--format",
                "raw",
                "--threads",
                "--gil",  # only the thread that holds the GIL: where the process's one core goes
                "--nonblocking",
                "--output",
                str(RESULTS / f"pyspy-{label}-{name}.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in (("worker", worker_pid), ("daphne", daphne_pid))
    ]
    try:
        yield
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            spy.wait(30)


def run(env: Env, *, quick: bool, sessions: int = 50, old: bool = True) -> dict[str, Any]:
    results = _run(env, quick=quick, sessions=sessions, old=old)
    results["cpu_weights"] = (
        "as deployed: Daphne's process group autogroup nice -10 (ten times a default group's "
        "share, as agentplat-web.service's CPUWeight), the worker's, PostgreSQL's, Redis's, "
        "the websocket clients' and the browsers' (the process that asks for the runs) the "
        "default; the *_equal scenarios: Daphne's the default too"
    )
    return results


def _run(env: Env, *, quick: bool, sessions: int, old: bool) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.db import close_old_connections
    from rest_framework.authtoken.models import Token

    from runs_app.services.runs import start_run
    from sessions_app.services.sessions import create_session

    emit_dir = env.workdir / "emit"
    emit_dir.mkdir(exist_ok=True)
    profile_dir = env.workdir / "profile"
    profile_dir.mkdir(exist_ok=True)
    many_count = 200 if quick else 500
    # BENCH_STREAMING=one,fifty,many,profiled: some of the current worker's scenarios.
    only = set(os.environ.get("BENCH_STREAMING", "one,fifty,many,profiled").split(","))
    user = User.objects.create_user("bench-stream", password="x")
    token = Token.objects.create(user=user).key
    pool = [create_session(owner=user, title=f"stream {i}") for i in range(many_count)]
    floor = asyncio.run(redis_floor(1000 if quick else 3000))
    results: dict[str, Any] = {"floor": floor, "frame_ms": _frame_ms()}

    def measure(
        worker: Any, daphne: Any, port: int, label: str, count: int, pace: int, tokens: int = 0
    ) -> None:
        if not tokens:
            # Long enough that every run streams at once for a while after the last has
            # started (500 runs take ~20 s to start here): 10 s at 50 tok/s, 60 s at 10.
            tokens = (250 if pace <= 20 else 200) if quick else (500 if pace <= 20 else 600)
        close_old_connections()
        results[label] = asyncio.run(
            scenario(
                port=port,
                token=token,
                sessions=pool[:count],
                user=user,
                tokens=tokens,
                pace_ms=pace,
                emit_dir=emit_dir,
                worker_pid=worker.pid,
                daphne_pid=daphne.pid,
                child_env=env.child_env(),
            )
        )
        print(f"bench: streaming {label}: {_brief(results[label])}", flush=True)

    def warm(count: int) -> None:
        # Every session streams once before the measured runs (imports, first connections).
        runs = [
            start_run(session=s, user=user, messages=[{"role": "user", "content": _script(5, 5)}])
            for s in pool[:count]
        ]
        _wait_runs([r.id for r in runs], 300)
        close_old_connections()

    # The current worker: one process, its run host carries every run; Daphne weighted as
    # deployed, then at equal weights (as a plain ``honcho start`` of the Procfile gives).
    daphne, port = env.daphne()
    worker = env.worker(
        4,
        app="bench.worker",
        pool="threads",
        BENCH_EMIT_DIR=str(emit_dir),
        BENCH_PROFILE_DIR=str(profile_dir),
    )
    try:
        warm(many_count)
        if "one" in only:
            measure(worker, daphne, port, "one", 1, 20)
        if "fifty" in only:
            with _spied(worker.pid, daphne.pid, "fifty"):
                measure(worker, daphne, port, "fifty", sessions, 20)
        if "starts" in only:  # what starting and ending a run costs: one token each
            with _spied(worker.pid, daphne.pid, "starts"):
                measure(worker, daphne, port, "starts", many_count, 100, tokens=1)
        if "many" in only:
            with _spied(worker.pid, daphne.pid, "many"):
                measure(worker, daphne, port, "many", many_count, 100)
        # Where the worker's time goes: the 50-session scenario again, profiled.
        if "profiled" in only:
            _profile(profile_dir, "start")
            measure(worker, daphne, port, "profiled", sessions, 20)
            _profile(profile_dir, "stop")
        daphne.stop()
        daphne, port = env.daphne(equal=True)
        if "fifty" in only:
            measure(worker, daphne, port, "fifty_equal", sessions, 20)
        if "many" in only:
            measure(worker, daphne, port, "many_equal", many_count, 100)
        stats = profile_dir / "host.pstats"
        if stats.exists():
            RESULTS.mkdir(exist_ok=True)
            shutil.copy(stats, RESULTS / "streaming-host.pstats")
            results["profile"] = _top_functions(stats, results["profiled"]["emitted"])
        results["worker"] = {
            "pool": "threads",
            "concurrency": 4,
            "processes": 1,
            "command": f"{VENV_BIN}/celery -A bench.worker worker --pool threads -c 4 "
            "--prefetch-multiplier 1",
        }
    finally:
        worker.stop()
        daphne.stop()
    # The old worker, side by side: one prefork process per live run.
    if old:
        tree = _old_worker_tree()
        daphne, port = env.daphne()
        worker = env.worker(
            sessions, app="bench.worker", pool="prefork", cwd=tree, BENCH_EMIT_DIR=str(emit_dir)
        )
        try:
            warm(sessions)
            measure(worker, daphne, port, "old_fifty", sessions, 20)
            results["old_worker"] = {
                "commit": OLD_WORKER_COMMIT,
                "pool": "prefork",
                "concurrency": sessions,
            }
        finally:
            worker.stop()
            daphne.stop()
    for key in ("one", "fifty", "many"):
        if key in results:
            results[f"ratio_p99_{key}"] = ratio(results[key]["p99_ms"], floor["p99_ms"])
    if "fifty" in results and "many" in results:
        fifty, many = results["fifty"], results["many"]
        extra_runs = many["sessions"] - fifty["sessions"]
        results["rss_mib_per_added_run"] = (
            many["worker_peak_rss_mib"] - fifty["worker_peak_rss_mib"]
        ) / max(1, extra_runs)
    if "old_fifty" in results and "fifty" in results:
        old_fifty, fifty = results["old_fifty"], results["fifty"]
        results["old_vs_new"] = {
            "produced": ratio(fifty["produced_tokens_per_s"], old_fifty["produced_tokens_per_s"]),
            "p99": ratio(old_fifty["p99_ms"], fifty["p99_ms"]),
            "worker_cpu_per_token": ratio(
                old_fifty["worker_cpu_us_per_token"], fifty["worker_cpu_us_per_token"]
            ),
            "worker_rss": ratio(old_fifty["worker_peak_rss_mib"], fifty["worker_peak_rss_mib"]),
        }
    return results


def _brief(r: dict[str, Any]) -> str:
    return (
        f"{r['sessions']} x {1000 / r['pace_ms']:.0f} tok/s: produced "
        f"{r['produced_tokens_per_s']:,.0f}/{r['target_tokens_per_s']:,.0f} tok/s, "
        f"delivered {r['delivered']}/{r['emitted']}, p50 {r['p50_ms']:.1f} ms, "
        f"p99 {r['p99_ms']:.1f} ms (first 3 s {r['p99_first_3s_ms']:.0f}, then "
        f"{r['p99_after_3s_ms']:.0f}), worker {r['worker_cpu_us_per_token']:.0f} µs/token, "
        f"Daphne {r['daphne_cpu_us_per_token']:.0f} µs/token, "
        f"RSS {r['worker_peak_rss_mib']:.0f} MiB; while all {r['sessions']} stream "
        f"({r.get('all_streaming_s', 0):.1f} s, {r.get('tokens_all_streaming', 0)} tokens): p50 "
        f"{r.get('p50_all_streaming_ms', float('nan')):.1f} ms, p99 "
        f"{r.get('p99_all_streaming_ms', float('nan')):.1f} ms; p99 by second "
        f"{' '.join(str(v) for v in r.get('p99_by_second_ms', []))} (in the worker, "
        f"emit → publish: {' '.join(str(v) for v in r.get('p99_in_worker_by_second_ms', []))}"
        "; hand-over → Daphne's send, p99 under / % over 50 ms: "
        f"{' '.join(f'{b}/{o:g}%' for _s, b, o in r.get('fanout_by_second', []))}; the "
        "clients' loop lag: "
        f"{' '.join(str(v) for v in r.get('clients_loop_lag_p99_by_second_ms', []))})"
        "; machine busy by second "
        f"{' '.join(f'{v:.2f}' for v in r.get('machine_busy_by_second', []))}; first tokens "
        f"over {r.get('first_token_spread_s', 0):.1f} s; CPU share worker "
        f"{r.get('worker_cpu_share', 0):.2f}, Daphne {r.get('daphne_cpu_share', 0):.2f}, "
        f"clients {r.get('clients_cpu_share', 0):.2f}; "
        f"time to the first token p50 {r.get('ttft_p50_ms', float('nan')):.0f} ms, p99 "
        f"{r.get('ttft_p99_ms', float('nan')):.0f} ms (the API answered in p99 "
        f"{r.get('api_answer_p99_ms', float('nan')):.0f} ms); CPU ms per run by command "
        f"{r.get('cpu_ms_per_run_by_command')}; CPU share by command "
        f"{r.get('cpu_share_by_command')}"
    )


def _frame_ms() -> float:
    from django.conf import settings

    return settings.STREAM_FRAME_MS
