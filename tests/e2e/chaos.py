"""A chaos driver (issue 25, docs/semantics.md §1.7 and §12): many runs of mixed scripted scripts
over many sessions and several worker processes while, at random, workers are SIGKILLed and
restarted, SIGSTOPped past their lease and continued, PostgreSQL connections are killed,
Redis is restarted empty and runs are cancelled. Afterwards the invariants are checked from
the database and the worktrees:

* every run terminal, every session idle with no busy run and a consistent head;
* every side-effect tool call ran at most once: each appends a line of its own to a file
  (``append log.txt <tag>`` / ``shell echo <tag> >> shell.log``), which appears at most once,
  exactly once when its part is ``completed``, never when it was denied, and never without a
  part that asked for it;
* no message or part twice (a part's order in its message, a call id in its run, a run's
  input, two messages of one run on one parent);
* every worktree equal to the last snapshot its session's path records;
* what each websocket client (a model of the chat in ``static/chat/``) was last shown for
  a message equals what a reload of the messages returns.

``run_chaos(ChaosConfig(...))`` starts everything (Daphne, the workers and a private
redis-server, on a database of its own), drives it and returns a ``ChaosReport``;
``tests/e2e/test_chaos.py`` runs it for a few minutes, ``bench/chaos.py`` for half an hour
(``./dev bench --only chaos``). The seed (``CHAOS_SEED``) decides the scripts, the sessions
they go to, and the faults' kinds, times and targets; the processes' own timing does the rest.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx

from .chaos_hosts import HostPool
from .stack import PrivateRedis, Processes, base_env, manage

TERMINAL = {"completed", "cancelled", "error", "paused"}
DRIVER_APP = "chaos-driver"  # the driver's own database connections: never terminated
SIDE_EFFECT_FILES = ("log.txt", "shell.log", "ask.log")
SHELL_LINE = re.compile(r"^echo (\S+) >> (\S+)$")
EVIDENCE_SHOWN = 16  # lines of evidence printed under a violation
SLOW_SECONDS = 5.0  # an API answer slower than this is listed in the report
FAULT_KINDS = (
    "sigkill_worker",
    "sigstop_worker",
    "pg_terminate",
    "redis_restart",
    "cancel",
    "kill_host",
)


SETUP_CODE = """
import json
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.authtoken.models import Token
call_command("migrate", verbosity=0)
tokens = {}
for name in json.loads('%s'):
    user = User.objects.create_user(name, password="chaos-pw")
    tokens[name] = Token.objects.create(user=user).key
print(json.dumps(tokens))
"""


def _checkpoint_weights() -> dict[str, float]:
    named = [m.strip() for m in os.environ.get("CHAOS_CHECKPOINTS", "").split(",") if m.strip()]
    # Not ``runs`` by default: that mode stores nothing before the run ends, by design
    # (docs/semantics.md §1.7, §1.10: a crash loses what it had not written), so after a worker
    # crash a side-effect call it made is not on record and its resume makes it again — the
    # at-most-once invariant does not hold for it, and the docs say so. CHAOS_CHECKPOINTS
    # =tool-batch,tool,runs includes it (expect those double side effects).
    return dict.fromkeys(named, 1.0) if named else {"tool-batch": 3, "tool": 1}


def default_seed() -> int:
    raw = os.environ.get("CHAOS_SEED", "")
    return int(raw) if raw.strip() else random.SystemRandom().randrange(1, 2**31)


def shell_available() -> bool:
    return shutil.which("bwrap") is not None


@dataclass
class ChaosConfig:
    admin_url: str  # a PostgreSQL URL of the server (its database is not used): ours goes beside
    workdir: Path
    seed: int = field(default_factory=default_seed)
    fault_seconds: float = 90.0
    runs: int = 200
    sessions: int = 50
    users: int = 3
    workers: int = 3
    ws_clients: int = 3
    sessions_per_client: int = 4
    lease_seconds: float = 4.0
    fault_every: tuple[float, float] = (1.0, 3.5)  # seconds between two faults
    fault_weights: dict[str, float] = field(
        default_factory=lambda: {
            "sigkill_worker": 2,
            "sigstop_worker": 2,
            "pg_terminate": 2,
            "redis_restart": 1,
            "cancel": 3,
        }
    )
    settle_seconds: float = 240.0  # after the faults: every run must have ended by then
    # Where the logs and worktrees go when there are violations (the workdir is deleted).
    keep_dir: Path | None = None
    # The database stays (not dropped) when there are violations: to look at them.
    keep_db: bool = field(default_factory=lambda: os.environ.get("CHAOS_KEEP_DB") == "1")
    shell: bool | None = None  # None: when bwrap is installed
    # The sessions' checkpoint modes, drawn with these weights (CHAOS_CHECKPOINTS, e.g.
    # "tool-batch,tool", weighs the named ones alike).
    checkpoints: dict[str, float] = field(default_factory=_checkpoint_weights)
    log: Callable[[str], None] = print
    # Worker hosts without a shared disk (tests/e2e/chaos_hosts.py): the workers spread over
    # them, a central store, and the fault kill_host. 0: one WORKSPACE_ROOT for every worker.
    hosts: int = 0


@dataclass
class Violation:
    kind: str
    detail: str
    session_id: str = ""
    run_id: str = ""
    evidence: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        where = " ".join(x for x in (self.session_id, self.run_id) if x)
        text = f"[{self.kind}] {where + ': ' if where else ''}{self.detail}"
        evidence = list(dict.fromkeys(self.evidence))  # once each, in order
        shown = evidence[:EVIDENCE_SHOWN]
        if len(evidence) > len(shown):
            shown.append(f"... {len(evidence) - len(shown)} more lines in report.json")
        return text + "".join(f"\n      | {line}" for line in shown)


@dataclass
class ChaosReport:
    seed: int
    config: dict[str, Any]
    faults: Counter = field(default_factory=Counter)
    fault_log: list[str] = field(default_factory=list)
    pg_backends_killed: int = 0
    submitted: int = 0
    resubmitted: int = 0
    submit_failures: list[str] = field(default_factory=list)
    run_status: Counter = field(default_factory=Counter)
    run_errors: Counter = field(default_factory=Counter)
    approvals: Counter = field(default_factory=Counter)
    ws: Counter = field(default_factory=Counter)
    checked: Counter = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    log_markers: Counter = field(default_factory=Counter)
    timings: dict[str, float] = field(default_factory=dict)
    kept: str = ""  # where the logs and worktrees were kept
    notes: list[str] = field(default_factory=list)  # what the violations have in common
    slow_requests: list[str] = field(default_factory=list)
    kept_db: str = ""  # the database, kept (CHAOS_KEEP_DB=1)
    worker_exits: list[str] = field(default_factory=list)  # workers that ended by themselves

    def violate(self, kind: str, detail: str, **where: str) -> None:
        self.violations.append(Violation(kind, detail, **where))

    def text(self) -> str:
        c = self.config
        by_kind = Counter(v.kind for v in self.violations)
        faults = ", ".join(f"{k} {self.faults[k]}" for k in FAULT_KINDS)
        lines = [
            f"chaos: seed {self.seed} (CHAOS_SEED={self.seed} repeats the scripts and faults); "
            f"{c['fault_seconds']:g} s of faults, {c['workers']} workers, lease "
            f"{c['lease_seconds']:g} s, {c['sessions']} sessions, shell "
            f"{'on' if c['shell'] else 'off (no bwrap)'}, checkpoint modes "
            + "/".join(c["checkpoints"]),
            f"faults injected: {sum(self.faults.values())} ({faults}; "
            f"{self.pg_backends_killed} PostgreSQL backends terminated)",
            f"runs: {self.submitted} submitted ({self.resubmitted} again after a failed request); "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.run_status.items()))
            + (
                " (errors: " + ", ".join(f"{k} {v}" for k, v in self.run_errors.most_common()) + ")"
                if self.run_errors
                else ""
            ),
            "approvals: "
            + (", ".join(f"{k} {v}" for k, v in sorted(self.approvals.items())) or "-"),
            "websocket clients: " + ", ".join(f"{k} {v}" for k, v in sorted(self.ws.items())),
            f"workers that exited by themselves (restarted, as systemd would): "
            f"{len(self.worker_exits)}"
            + (f" ({'; '.join(self.worker_exits[:6])})" if self.worker_exits else ""),
            "worker logs: "
            + (", ".join(f"{k!r} {v}" for k, v in self.log_markers.most_common()) or "-"),
            "timings: " + ", ".join(f"{k} {v:.0f} s" for k, v in self.timings.items()),
            f"invariants: {sum(self.checked.values())} checked, {len(self.violations)} violations",
        ]
        for name in sorted(set(self.checked) | set(by_kind)):
            lines.append(f"  {name}: {self.checked[name]} checked, {by_kind[name]} violations")
        lines += [f"  note: {note}" for note in self.notes]
        if self.slow_requests:
            lines.append(
                f"API answers slower than {SLOW_SECONDS:g} s: {len(self.slow_requests)} ("
                + "; ".join(self.slow_requests[:6])
                + ")"
            )
        if self.submit_failures:
            lines.append("requests that failed (retried): " + "; ".join(self.submit_failures[:10]))
        if self.violations:
            lines.append("violations:")
            lines += [f"  - {v}" for v in self.violations]
            lines.append("fault timeline (seconds from the start of the faults):")
            lines += [f"  {entry}" for entry in self.fault_log]
        if self.kept:
            lines.append(f"logs and worktrees kept in {self.kept}")
        if self.kept_db:
            lines.append(f"database kept: {self.kept_db}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "config": self.config,
            "faults": dict(self.faults),
            "pg_backends_killed": self.pg_backends_killed,
            "fault_log": self.fault_log,
            "submitted": self.submitted,
            "resubmitted": self.resubmitted,
            "run_status": dict(self.run_status),
            "run_errors": dict(self.run_errors),
            "approvals": dict(self.approvals),
            "ws": dict(self.ws),
            "checked": dict(self.checked),
            "invariants_checked": sum(self.checked.values()),
            "violations": [
                {
                    "kind": v.kind,
                    "detail": v.detail,
                    "session": v.session_id,
                    "run": v.run_id,
                    "evidence": v.evidence,
                }
                for v in self.violations
            ],
            "log_markers": dict(self.log_markers),
            "worker_exits": self.worker_exits,
            "notes": self.notes,
            "slow_requests": self.slow_requests,
            "timings": self.timings,
        }


# -- the database, as the driver reads it ---------------------------------------------------------
class Db:
    """One connection of the driver's own (``application_name`` chaos-driver, which the
    fault driver never terminates), shared by its threads, opened again when it breaks."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._conn = None

    def _connect(self):  # noqa: ANN202
        import psycopg
        from psycopg.rows import dict_row

        return psycopg.connect(
            self.url, autocommit=True, application_name=DRIVER_APP, row_factory=dict_row
        )

    def rows(self, sql: str, params: tuple | list = ()) -> list[dict[str, Any]]:
        import psycopg

        with self._lock:
            for attempt in range(3):
                try:
                    if self._conn is None or self._conn.closed:
                        self._conn = self._connect()
                    return self._conn.execute(sql, params).fetchall()
                except psycopg.OperationalError:
                    with contextlib.suppress(Exception):
                        self._conn.close()
                    self._conn = None
                    if attempt == 2:
                        raise
                    time.sleep(0.5)
        return []

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.close()
            self._conn = None


# -- the processes ---------------------------------------------------------------------------------
@dataclass
class WorkerSlot:
    index: int
    proc: subprocess.Popen
    stopped: bool = False
    generation: int = 0
    killed: bool = False  # ended on purpose (or already seen ended): restarted by whoever did
    host: str = ""  # its WORKER_HOST with several hosts (chaos_hosts.py)


class ChaosStack:
    """Daphne, ``workers`` Celery worker processes and a private redis-server, on a
    PostgreSQL database of its own (created here, dropped at ``stop``)."""

    def __init__(self, cfg: ChaosConfig, shell: bool) -> None:
        self.cfg = cfg
        self.workdir = cfg.workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workspace = self.workdir / "ws"
        self.logs = self.workdir / "logs"
        self.logs.mkdir(exist_ok=True)
        base = urlparse(cfg.admin_url)
        self.db_name = f"agentplat_chaos_{uuid.uuid4().hex[:10]}"
        self.admin_url = base._replace(path="/postgres").geturl()
        self.db_url = base._replace(path=f"/{self.db_name}").geturl()
        self.redis = PrivateRedis()
        self.env = base_env(
            DATABASE_URL=self.db_url,
            REDIS_URL=self.redis.url(0),
            WORKSPACE_ROOT=str(self.workspace),
            RUN_LEASE_SECONDS=f"{cfg.lease_seconds:g}",
            # A transaction of a SIGSTOPped worker holds its row locks this long at most.
            DB_IDLE_IN_TRANSACTION_SECONDS="5",
            AGENT_ALLOW_SHELL="true" if shell else "false",
            SCRIPTED_DEFAULT_PACE_MS="10",
            SESSIONS_PER_USER_MAX="0",
            LOG_LEVEL="INFO",
            SECRET_KEY=os.environ.get("SECRET_KEY", "") or uuid.uuid4().hex * 2,
        )
        self.procs = Processes()
        self.workers: list[WorkerSlot] = []
        self.host = ""
        self._db_created = False
        self.pool = HostPool(self.workdir, cfg.hosts) if cfg.hosts else None
        self.web_env = self.env

    def worker_env(self, slot: WorkerSlot) -> dict[str, str]:
        if self.pool is None:
            return self.env
        root = str(self.pool.roots[slot.host])
        return {**self.env, "WORKER_HOST": slot.host, "WORKSPACE_ROOT": root}

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql)

    def start(self, users: list[str]) -> dict[str, str]:
        """Everything up; ``users`` made, with API tokens: {username: token}."""
        self.redis.start()
        if self.pool is not None:  # the central store; the web holds no worktree
            self.pool.start()
            self.env.update(self.pool.env())
            mirror = str(self.workdir / "mirror")
            self.web_env = {**self.env, "WORKSPACE_ROOT": "", "MIRROR_ROOT": mirror}
        self._admin(f'CREATE DATABASE "{self.db_name}"')
        self._db_created = True
        # One Django start-up for the schema and the users (each costs seconds on a busy
        # machine); the API has no call that makes a user.
        out = manage(self.env, "shell", "-c", SETUP_CODE % json.dumps(users))
        tokens = json.loads(out.strip().splitlines()[-1])
        names = self.pool.live() if self.pool is not None else [""]
        for i in range(self.cfg.workers):
            slot = WorkerSlot(i, None, host=names[i % len(names)])  # type: ignore[arg-type]
            slot.proc = self.procs.worker(self.worker_env(slot), self.logs)
            self.workers.append(slot)
        self.host = self.procs.daphne(self.web_env, self.logs)
        return tokens

    def kill_host(self, name: str) -> list[WorkerSlot]:
        """Host ``name`` lost (chaos_hosts.py): its workers SIGKILLed, its root deleted; its
        slots now belong to a fresh host, restarted by the caller."""
        assert self.pool is not None
        slots = [s for s in self.workers if s.host == name]
        for slot in slots:
            self.kill_worker(slot)
        shutil.rmtree(self.pool.roots[name], ignore_errors=True)
        fresh = self.pool.fresh()
        for slot in slots:
            slot.host = fresh
        return slots

    def spare(self, slot: WorkerSlot) -> bool:
        """Whether a worker fault may pick ``slot``: with several hosts, only a worker whose
        host keeps another running (a host dies by ``kill_host`` alone)."""
        if self.pool is None:
            return True
        others = [
            s
            for s in self.workers
            if s is not slot and s.host == slot.host and s.proc.poll() is None and not s.stopped
        ]
        return bool(others)

    # the faults a worker can suffer ---------------------------------------------------------
    def kill_worker(self, slot: WorkerSlot) -> None:
        slot.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(slot.proc.pid, signal.SIGKILL)  # the whole worker: its children too
        slot.proc.wait(10)
        slot.stopped = False

    def restart_worker(self, slot: WorkerSlot) -> None:
        if slot.proc.poll() is None:
            return
        slot.proc = self.procs.worker(self.worker_env(slot), self.logs)
        slot.generation += 1
        slot.killed = False

    def stop_worker(self, slot: WorkerSlot) -> None:
        os.killpg(slot.proc.pid, signal.SIGSTOP)
        slot.stopped = True

    def continue_worker(self, slot: WorkerSlot) -> None:
        if slot.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(slot.proc.pid, signal.SIGCONT)
        slot.stopped = False

    def heal(self) -> None:
        """Every worker alive and running, Redis up."""
        for slot in self.workers:
            if slot.stopped:
                self.continue_worker(slot)
            if slot.proc.poll() is not None:
                self.restart_worker(slot)
        if self.redis.proc is None or self.redis.proc.poll() is not None:
            self.redis.start()

    def worker_logs(self) -> dict[str, str]:
        return {
            log.name: log.read_text(errors="replace")
            for proc, log in self.procs.procs
            if "worker" in log.name
        }

    def stop(self, *, keep_db: bool = False) -> None:
        for slot in self.workers:
            if slot.stopped:
                self.continue_worker(slot)
        self.procs.stop()
        self.redis.stop()
        if self.pool is not None:
            self.pool.stop()
        if self._db_created and not keep_db:
            self._admin(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')


# -- the scripts -----------------------------------------------------------------------------------
def _words(rng: random.Random, n: int) -> str:
    vocabulary = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "eta",
        "theta",
        "iota",
        "kappa",
        "lambda",
        "mu",
    ]
    return " ".join(rng.choice(vocabulary) for _ in range(n))


def make_script(rng: random.Random, tag: str, shell: bool) -> tuple[str, str]:
    """(kind, script) for the run tagged ``tag``: every side effect appends a line that
    names the tag and the call, unique in the whole chaos run."""
    kinds = ["text", "files", "approval", "mixed"] + (["shell"] if shell else [])
    weights = [2, 4, 2, 2] + ([2] if shell else [])
    kind = rng.choices(kinds, weights)[0]
    pace = rng.choice([5, 15, 30])
    if kind == "text":
        lines = [f"pace {pace}", f"say {tag} {_words(rng, rng.randint(10, 40))}"]
        if rng.random() < 0.5:
            lines += [f"think {_words(rng, 8)}", f"say {_words(rng, rng.randint(5, 20))}"]
    elif kind == "files":
        lines = [
            f"pace {pace}",
            f"say {tag} {_words(rng, 6)}",
            f"append log.txt {tag}-1",
            f"write notes/{tag}.txt {tag} {_words(rng, 3)}",
            f"say {_words(rng, 8)}",
            f"append log.txt {tag}-2",
            f"wait {rng.choice([0.2, 0.5, 1, 2])}",
            f"append log.txt {tag}-3",
            f"say {_words(rng, 5)}",
        ]
        if rng.random() < 0.3:
            lines += [f"delete notes/{tag}.txt", f"append log.txt {tag}-4"]
    elif kind == "shell":
        lines = [
            f"say {tag} {_words(rng, 5)}",
            f"shell echo {tag}-s1 >> shell.log",
            f"say {_words(rng, 6)}",
            f"shell echo {tag}-s2 >> shell.log",
            f"wait {rng.choice([0.2, 1])}",
            f"append log.txt {tag}-3",
        ]
    elif kind == "approval":
        lines = [
            f"say {tag} asking first",
            f"append ask.log {tag}-a1",
            f"say {_words(rng, 6)}",
            f"append log.txt {tag}-2",
        ]
    else:
        lines = [
            f"pace {pace}",
            f"say {tag} {_words(rng, 12)}",
            f"append log.txt {tag}-1",
            f"wait {rng.choice([0.5, 1, 3])}",
            f"say {_words(rng, 10)}",
            f"append ask.log {tag}-a2" if rng.random() < 0.4 else f"read notes/{tag}.txt",
            f"append log.txt {tag}-2",
        ]
        if shell:
            lines.append(f"shell echo {tag}-s3 >> shell.log")
    return kind, "\n".join(lines)


def side_effect_of(tool: str, args: Any) -> tuple[str, str] | None:
    """(file, line) that a tool call appends, for the calls the chaos scripts make."""
    args = args if isinstance(args, dict) else {}
    if tool == "append" and args.get("path") in SIDE_EFFECT_FILES:
        return args["path"], str(args.get("content", ""))
    if tool == "shell":
        found = SHELL_LINE.match(str(args.get("command", "")).strip())
        if found and found.group(2) in SIDE_EFFECT_FILES:
            return found.group(2), found.group(1)
    return None


# -- the websocket clients -------------------------------------------------------------------------
QUIET_SECONDS = 10.0  # static/chat/sync.js: QUIET_MS


class ChatModel:
    """What the chat (``static/chat/``) shows of one session: subscribe, load the path over
    the API, apply the events (a delta past what it has refetches, one behind it is dropped;
    a message that does not extend the path reloads); a dropped socket is opened again and
    the path loaded again. Where events carry ``prev`` (the ``seq`` of the session's event
    before them), one whose ``prev`` is not the last ``seq`` applied means events were
    missed: the stored state is read again (a resync); and when a run ends the chat reads
    exactly what the database holds (a final resync), as ``static/chat/sync.js`` does."""

    def __init__(
        self, host: str, token: str, session_id: str, stats: Counter, clock: Callable[[], float]
    ) -> None:
        self.host, self.token, self.session_id = host, token, session_id
        self.clock = clock
        # For the report: the last events of each message, and the socket's life.
        self.journal: dict[str, deque[str]] = defaultdict(lambda: deque(maxlen=12))
        self.connections: deque[str] = deque(maxlen=20)
        self.http = httpx.Client(
            base_url=f"http://{host}", headers={"Authorization": f"Token {token}"}, timeout=30
        )
        self.messages: dict[str, dict[str, Any]] = {}  # id → message, its parts by id
        self.order: list[str] = []
        self.stats = stats
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self._refetch_at: float | None = None
        self._reload_at: float | None = None
        self._resync_at: float | None = None
        self._resync_final = False
        self.last_seq: int | None = None
        self.status = "idle"
        self.last_event_at = time.monotonic()
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"ws-{session_id}")

    # the API ----------------------------------------------------------------------------------
    def _fetch_path(self) -> list[dict[str, Any]]:
        url: str | None = f"/api/sessions/{self.session_id}/messages/?limit=200"
        pages: list[list[dict[str, Any]]] = []
        while url:
            answer = self.http.get(url)
            answer.raise_for_status()
            page = answer.json()
            pages.append(page["results"])
            url = page.get("previous")
        return [m for page in reversed(pages) for m in page]

    def _load(self, merge: bool) -> None:
        fetched = self._fetch_path()
        with self.lock:
            if not merge:
                self.messages, self.order = {}, []
            for m in fetched:
                self._upsert_message({**m, "parts": []})
                for p in m["parts"]:
                    self._upsert_part(p, from_fetch=True)
            if not merge:
                self.order = [m["id"] for m in fetched]
        self.stats["reloads" if not merge else "refetches"] += 1
        self.connections.append(
            f"{self.clock():.1f} {'refetch' if merge else 'reload'}: {len(fetched)} messages"
        )

    def _resync(self, final: bool) -> None:
        """Read the stored state again: exactly it when ``final`` (a run ended) or when no
        run holds the session; else merged, live text that is ahead kept."""
        session = self.http.get(f"/api/sessions/{self.session_id}/")
        session.raise_for_status()
        fresh = session.json()
        live = ("busy", "waiting")
        # No run holds the session: what it stored is all there is (as static/chat/sync.js).
        exact = final or fresh["status"] not in live
        self.status = fresh["status"]
        self._load(merge=not exact)
        self.stats["final resyncs" if final else "resyncs"] += 1

    def _want_resync(self, final: bool, delay: float) -> None:
        self._resync_final = self._resync_final or final
        at = time.monotonic() + delay
        self._resync_at = at if self._resync_at is None else min(self._resync_at, at)

    def _note_seq(self, ev: dict[str, Any]) -> None:
        seq = ev.get("seq")
        if not isinstance(seq, int):
            return
        if self.last_seq is not None and "prev" in ev and ev["prev"] != self.last_seq:
            self.stats["prev gaps"] += 1
            self.connections.append(f"{self.clock():.1f} prev gap ({ev['type']})")
            self._want_resync(False, 0.1)
        self.last_seq = seq if self.last_seq is None else max(self.last_seq, seq)

    # the model ------------------------------------------------------------------------------
    def _upsert_message(self, m: dict[str, Any]) -> None:
        entry = self.messages.setdefault(m["id"], {"parts": {}})
        for key in ("id", "role", "parent_id", "completed_at", "error", "run_id"):
            entry[key] = m.get(key)
        if m["id"] not in self.order:
            self.order.append(m["id"])
        for p in m.get("parts") or []:
            self._upsert_part(p, from_fetch=False)

    def _upsert_part(self, p: dict[str, Any], *, from_fetch: bool) -> None:
        message = self.messages.get(p["message_id"])
        if message is None:
            message = self.messages[p["message_id"]] = {
                "id": p["message_id"],
                "role": "assistant",
                "parts": {},
                "stub": True,
            }
            self.order.append(p["message_id"])
        known = message["parts"].get(p["id"])
        p = dict(p)
        ahead = known and from_fetch and isinstance(known.get("text"), str)
        if ahead and isinstance(p.get("text"), str) and len(known["text"]) > len(p["text"]):
            p["text"] = known["text"]  # live deltas are ahead of the stored text
        known_state = (known or {}).get("state") or {}
        state = p.get("state")
        if (
            state
            and state.get("status") in ("running", "pending")
            and len(known_state.get("output") or "") > len(state.get("output") or "")
        ):
            p["state"] = {**state, "output": known_state["output"]}  # live output is ahead
        message["parts"][p["id"]] = {**(known or {}), **p}

    def _find_part(self, part_id: str) -> dict[str, Any] | None:
        for message in self.messages.values():
            if part_id in message["parts"]:
                return message["parts"][part_id]
        return None

    def _delta(self, ev: dict[str, Any], key: str) -> None:
        part = self._find_part(ev["part_id"])
        if part is None:
            if key == "output" or ev["offset"] != 0:
                self._refetch_at = self._refetch_at or time.monotonic() + 0.25
                self.stats["gaps"] += 1
                return
            kind = "reasoning" if ev["type"] == "reasoning-delta" else "text"
            self._upsert_part(
                {
                    "id": ev["part_id"],
                    "message_id": ev["message_id"],
                    "order": 999,
                    "type": kind,
                    "text": "",
                },
                from_fetch=False,
            )
            part = self._find_part(ev["part_id"])
        holder = part if key == "text" else part.setdefault("state", {})
        have = holder.get(key) or ""
        if ev["offset"] > len(have):
            self._refetch_at = self._refetch_at or time.monotonic() + 0.25
            self.stats["gaps"] += 1
            return
        if ev["offset"] + len(ev["text"]) <= len(have):
            return
        holder[key] = have[: ev["offset"]] + ev["text"]

    def _note(self, ev: dict[str, Any]) -> None:
        kind = ev.get("type")
        if kind == "message.updated":
            m = ev["message"]
            mid, what = (
                m["id"],
                f"{len(m.get('parts') or [])} parts, done {bool(m['completed_at'])}",
            )
        elif kind == "message.part.updated":
            p = ev["part"]
            mid = p["message_id"]
            status = (p.get("state") or {}).get("status", "")
            what = f"{p['id']} {p['type']} {p.get('tool', '')} {status}".rstrip()
        elif kind in ("text-delta", "reasoning-delta", "tool-output-delta"):
            mid, what = ev["message_id"], f"{ev['part_id']} @{ev['offset']}+{len(ev['text'])}"
        elif kind in ("message.removed", "message.part.removed"):
            mid, what = ev["message_id"], ev.get("part_id", "")
        else:
            return
        self.journal[mid].append(f"{self.clock():.1f} {kind} {what}")

    def handle(self, ev: dict[str, Any]) -> None:
        self.stats["events"] += 1
        self.last_event_at = time.monotonic()
        kind = ev.get("type")
        self._note(ev)
        self._note_seq(ev)
        if kind == "session.status":
            self.status = ev.get("status", self.status)
        elif kind == "session.updated":
            self.status = (ev.get("session") or {}).get("status", self.status)
        elif kind == "run.updated" and (ev.get("run") or {}).get("status") in TERMINAL:
            # Everything the run stored is committed before this event: show exactly that.
            self._want_resync(True, 0.0)
        with self.lock:
            if kind in ("text-delta", "reasoning-delta"):
                self._delta(ev, "text")
            elif kind == "tool-output-delta":
                self._delta(ev, "output")
            elif kind == "message.updated":
                m = ev["message"]
                tail = self.order[-1] if self.order else None
                if m["id"] not in self.messages and (m.get("parent_id") or None) != tail:
                    self._reload_at = time.monotonic() + 0.1  # another branch: the head moved
                    return
                self._upsert_message(m)
            elif kind == "message.part.updated":
                self._upsert_part(ev["part"], from_fetch=False)
            elif kind == "message.removed":
                self.messages.pop(ev["message_id"], None)
                self.order = [i for i in self.order if i != ev["message_id"]]
            elif kind == "message.part.removed":
                message = self.messages.get(ev["message_id"])
                if message:
                    message["parts"].pop(ev["part_id"], None)

    def _due(self) -> None:
        """The reads asked for that are due; one that fails is tried again a second later
        (the server is away), the socket left as it is."""
        now = time.monotonic()
        if (
            self.status in ("busy", "waiting")
            and now - self.last_event_at > QUIET_SECONDS
            and self._resync_at is None
        ):
            # A run in progress and nothing heard for a while: its last events may be lost
            # (its worker killed between its commit and its publish). Read the session again.
            self.last_event_at = now
            self.stats["quiet resyncs"] += 1
            self.connections.append(f"{self.clock():.1f} quiet: resync")
            self._want_resync(False, 0.0)
        try:
            if self._reload_at is not None and now >= self._reload_at:
                self._load(merge=False)
                self._reload_at = None
            if self._refetch_at is not None and now >= self._refetch_at:
                self._load(merge=True)
                self._refetch_at = None
            if self._resync_at is not None and now >= self._resync_at:
                self._resync(self._resync_final)
                self._resync_at, self._resync_final = None, False
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            self.stats["reads failed (again in 1 s)"] += 1
            self.connections.append(f"{self.clock():.1f} read failed: {exc.__class__.__name__}")
            for name in ("_reload_at", "_refetch_at", "_resync_at"):
                if getattr(self, name) is not None:
                    setattr(self, name, now + 1.0)

    def _run(self) -> None:
        from websockets.exceptions import ConnectionClosed
        from websockets.sync.client import connect

        url = f"ws://{self.host}/ws/sessions/{self.session_id}/?token={self.token}"
        first = True
        while not self.stop.is_set():
            try:
                with connect(url, open_timeout=10) as ws:
                    hello = json.loads(ws.recv(timeout=10))
                    if hello.get("type") != "subscribed":
                        raise RuntimeError(f"first frame {hello}")
                    self.last_seq = None
                    # Subscribed first, then the state over the API, then the events that
                    # came meanwhile (the socket holds them): as the chat starts.
                    self._load(merge=False)
                    self.stats["connects"] += 1
                    if not first:
                        self.stats["reconnects"] += 1
                    first = False
                    while not self.stop.is_set():
                        try:
                            raw = ws.recv(timeout=0.2)
                        except TimeoutError:
                            self._due()
                            continue
                        self.handle(json.loads(raw))
                        self._due()
            except ConnectionClosed as exc:
                self.stats["disconnects"] += 1
                self.connections.append(f"{self.clock():.1f} socket closed ({exc})")
            except Exception as exc:  # a refused connect while Daphne's Redis is away, …
                self.stats[f"errors ({exc.__class__.__name__})"] += 1
                self.connections.append(f"{self.clock():.1f} {exc.__class__.__name__}: {exc}")
            if not self.stop.is_set():
                time.sleep(1.0)  # as the chat: open it again a second later

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(15)
        self.http.close()


# -- the driver ------------------------------------------------------------------------------------
@dataclass
class Submission:
    tag: str
    session_id: str
    user: str
    kind: str
    script: str
    run_id: str | None = None
    attempts: int = 0


class Chaos:
    def __init__(self, cfg: ChaosConfig) -> None:
        self.cfg = cfg
        self.shell = shell_available() if cfg.shell is None else cfg.shell
        self.report = ChaosReport(
            seed=cfg.seed,
            config={
                "fault_seconds": cfg.fault_seconds,
                "runs": cfg.runs,
                "sessions": cfg.sessions,
                "workers": cfg.workers,
                "lease_seconds": cfg.lease_seconds,
                "shell": self.shell,
                "ws_clients": cfg.ws_clients,
                "checkpoints": cfg.checkpoints,
                "hosts": cfg.hosts,
            },
        )
        self.stack = ChaosStack(cfg, self.shell)
        self.db: Db | None = None
        self.tokens: dict[str, str] = {}
        self.clients: dict[str, httpx.Client] = {}
        self.owner_of: dict[str, str] = {}  # session → user
        self.sessions: list[str] = []
        self.submissions: list[Submission] = []
        self.watchers: list[tuple[str, ChatModel]] = []
        self.stop_driving = threading.Event()
        self.t0 = 0.0
        self.log = cfg.log

    def elapsed(self) -> float:
        """Seconds since the faults began (negative before): the fault timeline's clock."""
        return time.monotonic() - self.t0 if self.t0 else 0.0

    # setting up -------------------------------------------------------------------------------
    def _http(self, token: str) -> httpx.Client:
        """A client of the API whose slow answers (over ``SLOW_SECONDS``) the report lists."""

        def started(request: httpx.Request) -> None:
            request.extensions["chaos_started"] = time.monotonic()

        def answered(response: httpx.Response) -> None:
            began = response.request.extensions.get("chaos_started")
            took = time.monotonic() - began if began else 0.0
            if took > SLOW_SECONDS:
                request = response.request
                self.report.slow_requests.append(
                    f"{took:.1f} s: {request.method} {request.url.path} -> "
                    f"{response.status_code} (asked at {self.elapsed() - took:.1f} s)"
                )

        return httpx.Client(
            base_url=f"http://{self.stack.host}",
            headers={"Authorization": f"Token {token}"},
            timeout=60,
            event_hooks={"request": [started], "response": [answered]},
        )

    def _with_retries(self, what: str, fn: Callable[[], httpx.Response]) -> httpx.Response:
        for attempt in range(10):
            try:
                answer = fn()
                if answer.status_code < 500:
                    return answer
            except httpx.HTTPError:
                pass
            time.sleep(0.5 * (attempt + 1))
        raise RuntimeError(f"{what}: the API did not answer")

    def setup(self) -> None:
        self.tokens = self.stack.start([f"chaos{i}" for i in range(self.cfg.users)])
        self.db = Db(self.stack.db_url)
        for name, token in self.tokens.items():
            self.clients[name] = self._http(token)
        if self.stack.pool is not None:  # sessions placed on live hosts, not on none
            self._hosts_beat(len(self.stack.pool.live()))
        rng = random.Random(f"{self.cfg.seed}:sessions")
        users = list(self.tokens)
        for i in range(self.cfg.sessions):
            user = users[i % len(users)]
            modes = list(self.cfg.checkpoints)
            checkpoint = rng.choices(modes, [self.cfg.checkpoints[m] for m in modes])[0]
            body = {
                "title": f"chaos {i}",
                "checkpoint": checkpoint,
                # Only ask.log asks: the driver decides those calls over the API.
                "permissions": {"append": {"ask.log": "ask"}},
            }
            answer = self._with_retries(
                "session",
                lambda user=user, body=body: self.clients[user].post("/api/sessions/", json=body),
            )
            assert answer.status_code == 201, answer.text
            sid = answer.json()["id"]
            self.sessions.append(sid)
            self.owner_of[sid] = user
        watched = rng.sample(
            self.sessions,
            min(len(self.sessions), self.cfg.ws_clients * self.cfg.sessions_per_client),
        )
        for c in range(self.cfg.ws_clients):
            for sid in watched[c :: self.cfg.ws_clients]:
                model = ChatModel(
                    self.stack.host,
                    self.tokens[self.owner_of[sid]],
                    sid,
                    self.report.ws,
                    self.elapsed,
                )
                model.start()
                self.watchers.append((f"client{c}", model))

    def _hosts_beat(self, n: int) -> None:
        assert self.db is not None
        for _ in range(600):
            beat = self.db.rows(
                "SELECT count(*) AS n FROM sessions_app_host"
                " WHERE last_heartbeat > now() - make_interval(secs => %s)",
                (self.cfg.lease_seconds,),
            )[0]["n"]
            if beat >= n:
                return
            time.sleep(0.2)  # until the hosts beat
        raise RuntimeError(f"{n} hosts did not beat")

    # runs ----------------------------------------------------------------------------------------
    def plan(self) -> list[tuple[float, Submission]]:
        rng = random.Random(f"{self.cfg.seed}:runs")
        # Every session gets its share; the order and times are random: runs queue per session.
        sessions = [self.sessions[i % len(self.sessions)] for i in range(self.cfg.runs)]
        rng.shuffle(sessions)
        span = max(1.0, self.cfg.fault_seconds * 0.8)
        times = sorted(rng.uniform(0, span) for _ in range(self.cfg.runs))
        plan = []
        for i, (at, sid) in enumerate(zip(times, sessions, strict=True)):
            tag = f"c{i:04d}"
            kind, script = make_script(rng, tag, self.shell)
            plan.append((at, Submission(tag, sid, self.owner_of[sid], kind, script)))
        return plan

    def _find_run(self, tag: str) -> str | None:
        assert self.db is not None
        rows = self.db.rows(
            "SELECT id FROM runs_app_run WHERE input::text LIKE %s ORDER BY id", (f"%{tag} %",)
        )
        return rows[0]["id"] if rows else None

    def submit(self, sub: Submission) -> None:
        """POST the run (enqueued behind the session's). A request that fails may still have
        made the run: the database says; if it did not, the run goes again under a new tag
        (a late commit of the first then shows as a run of its own, never as a twice)."""
        base, script = sub.tag, sub.script
        while sub.attempts < 6:
            sub.attempts += 1
            if sub.attempts > 1:
                sub.tag = f"{base}r{sub.attempts}"
                sub.script = script.replace(base, sub.tag)
                self.report.resubmitted += 1
            error = ""
            try:
                answer = self.clients[sub.user].post(
                    f"/api/sessions/{sub.session_id}/runs/",
                    json={
                        "messages": [{"role": "user", "content": sub.script}],
                        "multitask_strategy": "enqueue",
                    },
                )
                if answer.status_code == 202:
                    sub.run_id = answer.json()["id"]
                    return
                error = f"{answer.status_code} {answer.text[:120]}"
            except httpx.HTTPError as exc:
                error = f"{exc.__class__.__name__}: {exc}"
            self.report.submit_failures.append(f"{sub.tag}: {error}")
            time.sleep(3.0)
            found = self._find_run(sub.tag)
            if found:
                sub.run_id = found
                return
            time.sleep(1.0)

    def drive_runs(self, plan: list[tuple[float, Submission]]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(4, thread_name_prefix="submit") as pool:
            futures = []
            for at, sub in plan:
                delay = self.t0 + at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                self.submissions.append(sub)
                futures.append(pool.submit(self.submit, sub))
            for f in futures:
                f.result()
        self.report.submitted = sum(1 for s in self.submissions if s.run_id)

    def approve_loop(self) -> None:
        """Decides the calls that wait for the owner, over the API, a moment after they ask:
        mostly allow, sometimes deny."""
        assert self.db is not None
        rng = random.Random(f"{self.cfg.seed}:approvals")
        first_seen: dict[str, float] = {}
        while not self.stop_driving.is_set():
            try:
                rows = self.db.rows(
                    "SELECT r.id, u.username FROM runs_app_run r"
                    " JOIN sessions_app_session s ON s.id = r.session_id"
                    " JOIN auth_user u ON u.id = s.owner_id WHERE r.status = 'requires_action'"
                )
            except Exception:
                time.sleep(1)
                continue
            now = time.monotonic()
            for row in rows:
                seen = first_seen.setdefault(row["id"], now + rng.uniform(0.0, 2.0))
                if now < seen:
                    continue
                http = self.clients[row["username"]]
                try:
                    run = http.get(f"/api/runs/{row['id']}/").json()
                    for call in (run.get("required_action") or {}).get("tool_calls", []):
                        decision = "allow" if rng.random() < 0.75 else "deny"
                        answer = http.post(
                            f"/api/runs/{row['id']}/approve/",
                            json={"part_id": call["part_id"], "decision": decision},
                        )
                        if answer.status_code == 200:
                            self.report.approvals[decision] += 1
                        else:
                            self.report.approvals[f"refused {answer.status_code}"] += 1
                except (httpx.HTTPError, ValueError):
                    self.report.approvals["request failed"] += 1
                first_seen[row["id"]] = now + 1.0  # again later if it still waits
            time.sleep(0.3)

    # faults ---------------------------------------------------------------------------------------
    def fault_loop(self, deadline: float) -> None:
        rng = random.Random(f"{self.cfg.seed}:faults")
        kinds = list(self.cfg.fault_weights)
        weights = [self.cfg.fault_weights[k] for k in kinds]
        followups: list[tuple[float, str, Callable[[], None]]] = []
        next_fault = time.monotonic() + rng.uniform(*self.cfg.fault_every)
        # With several hosts, one is lost for sure: past the faults' half, while none was, a
        # host kill is what comes next (a draw of 16 faults once held none: CI).
        halfway = time.monotonic() + (deadline - time.monotonic()) / 2
        owed = self.stack.pool is not None and "kill_host" in kinds
        while True:
            now = time.monotonic()
            self._supervise(followups)
            for item in [f for f in followups if f[0] <= now]:
                followups.remove(item)
                self._note(item[1])
                try:
                    item[2]()
                except Exception as exc:
                    self._note(f"{item[1]} failed: {exc}")
            if now >= deadline:
                break
            if now >= next_fault:
                kind = rng.choices(kinds, weights)[0]
                if owed and now >= halfway and not self.report.faults["kill_host"]:
                    kind = "kill_host"
                try:
                    self._fault(kind, rng, followups)
                except Exception as exc:
                    self._note(f"{kind} failed: {exc.__class__.__name__}: {exc}")
                next_fault = now + rng.uniform(*self.cfg.fault_every)
            wake = min([next_fault, deadline, *(f[0] for f in followups)])
            time.sleep(max(0.01, min(0.5, wake - time.monotonic())))
        for _, what, action in followups:  # the faults end: continue and restart at once
            self._note(what + " (at the end of the faults)")
            with contextlib.suppress(Exception):
                action()

    def _supervise(self, followups: list) -> None:
        """A worker that ended without being killed here is started again a second later,
        as systemd's ``Restart=always`` does (platform/agentplat-worker.service)."""
        stack = self.stack
        for slot in stack.workers:
            code = slot.proc.poll()
            if code is None or slot.killed:
                continue
            slot.killed = True  # restarted once
            log = next((lg for pr, lg in stack.procs.procs if pr is slot.proc), None)
            what = f"worker {slot.index} (pid {slot.proc.pid}) exited by itself, code {code}"
            if log is not None:
                what += f" ({log.name}: {_last_error(log)})"
            self.report.worker_exits.append(f"{self.elapsed():.1f} s: {what}")
            self._note(what + "; back in 1.0 s")
            followups.append(
                (
                    time.monotonic() + 1.0,
                    f"restart worker {slot.index}",
                    lambda s=slot: stack.restart_worker(s),
                )
            )

    def _note(self, text: str) -> None:
        entry = f"{time.monotonic() - self.t0:7.1f}  {text}"
        self.report.fault_log.append(entry)

    def _fault(self, kind: str, rng: random.Random, followups: list) -> None:
        stack, lease = self.stack, self.cfg.lease_seconds
        running = [s for s in stack.workers if s.proc.poll() is None and not s.stopped]
        if kind == "kill_host":
            if not self._kill_host(rng, followups):
                return
        elif kind == "sigkill_worker":
            alive = [s for s in stack.workers if s.proc.poll() is None and stack.spare(s)]
            if not alive:
                return
            slot = rng.choice(alive)
            stack.kill_worker(slot)
            back = rng.uniform(0.2, 3.0)
            self._note(f"SIGKILL worker {slot.index} (pid {slot.proc.pid}); back in {back:.1f} s")
            followups.append(
                (
                    time.monotonic() + back,
                    f"restart worker {slot.index}",
                    lambda s=slot: stack.restart_worker(s),
                )
            )
        elif kind == "sigstop_worker":
            running = [s for s in running if stack.spare(s)]
            if len(running) < 2:
                return  # one worker keeps going
            slot = rng.choice(running)
            stack.stop_worker(slot)
            held = rng.uniform(1.5, 2.5) * lease
            generation = slot.generation
            self._note(f"SIGSTOP worker {slot.index} (pid {slot.proc.pid}) for {held:.1f} s")

            def resume(s: WorkerSlot = slot, g: int = generation) -> None:
                if s.generation == g and s.stopped:
                    stack.continue_worker(s)
                else:
                    self._note(f"(worker {s.index} was killed meanwhile: nothing to continue)")

            followups.append((time.monotonic() + held, f"SIGCONT worker {slot.index}", resume))
        elif kind == "pg_terminate":
            assert self.db is not None
            pids = [
                r["pid"]
                for r in self.db.rows(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s"
                    " AND pid <> pg_backend_pid() AND application_name <> %s",
                    (stack.db_name, DRIVER_APP),
                )
            ]
            if not pids:
                return
            chosen = rng.sample(pids, rng.randint(1, len(pids)))
            killed = sum(
                1
                for pid in chosen
                if self.db.rows("SELECT pg_terminate_backend(%s) AS ok", (pid,))[0]["ok"]
            )
            self.report.pg_backends_killed += killed
            self._note(f"pg_terminate_backend: {killed} of {len(pids)} backends")
        elif kind == "redis_restart":
            down = rng.uniform(0.2, 2.0)
            self._note(f"redis restart ({down:.1f} s down)")
            stack.redis.restart(down)
        elif kind == "cancel":
            assert self.db is not None
            live = self.db.rows(
                "SELECT r.id, u.username FROM runs_app_run r"
                " JOIN sessions_app_session s ON s.id = r.session_id"
                " JOIN auth_user u ON u.id = s.owner_id"
                " WHERE r.status NOT IN ('completed', 'cancelled', 'error', 'paused')"
                " ORDER BY r.id"
            )
            if not live:
                return
            row = rng.choice(live)
            self._note(f"cancel {row['id']}")

            def cancel(run_id: str = row["id"], http: httpx.Client = self.clients[row["username"]]):
                # Apart: an answer that takes long (a row lock a stopped worker holds) must
                # not hold up the faults that follow.
                try:
                    answer = http.post(f"/api/runs/{run_id}/cancel/")
                    self._note(f"cancel {run_id} answered {answer.status_code}")
                except httpx.HTTPError as exc:
                    self._note(f"cancel {run_id} failed: {exc.__class__.__name__}")

            threading.Thread(target=cancel, daemon=True, name="cancel").start()
        self.report.faults[kind] += 1

    def _kill_host(self, rng: random.Random, followups: list) -> bool:
        """A host lost whole, a fresh one in its place (chaos_hosts.py); False: none may be
        lost now (another must carry on)."""
        stack, pool = self.stack, self.stack.pool
        assert self.db is not None
        if pool is None:
            return False
        running = sorted({s.host for s in stack.workers if s.proc.poll() is None and not s.stopped})
        if len(running) < 2:
            return False  # the other host's workers must be up to carry on
        homed = self.db.rows("SELECT host, count(*) AS n FROM sessions_app_session GROUP BY host")
        weight = {r["host"]: r["n"] for r in homed}
        name = rng.choices(running, [weight.get(h, 0) + 1 for h in running])[0]  # the busier
        slots = stack.kill_host(name)
        at = self.elapsed()
        rows = self.db.rows(
            "SELECT id, replicated_snapshot FROM sessions_app_session WHERE host = %s", (name,)
        )
        parts = self.db.rows(
            "SELECT id, session_id, tool, state FROM sessions_app_part"
            " WHERE type = 'tool' AND session_id = ANY(%s)",
            ([r["id"] for r in rows],),
        )
        loss = pool.record_loss(name, at, rows, parts, side_effect_of)
        back = rng.uniform(1.0, 4.0)
        fresh = slots[0].host if slots else "?"
        self._note(
            f"kill host {name} (workers {[s.index for s in slots]}; {loss.sessions} sessions, "
            f"{loss.calls_lost} completed calls not replicated); {fresh} in {back:.1f} s"
        )
        for slot in slots:
            followups.append(
                (
                    time.monotonic() + back,
                    f"restart worker {slot.index} on {slot.host}",
                    lambda s=slot: stack.restart_worker(s),
                )
            )
        return True

    # the end --------------------------------------------------------------------------------------
    def settle(self) -> bool:
        """Every run ended and every session idle, within ``settle_seconds``."""
        assert self.db is not None
        deadline = time.monotonic() + self.cfg.settle_seconds
        last_print = 0.0
        # Runs that have not ended while no session is held: nothing will move them (the
        # sweep starts again only the runs that hold a session). Given two leases and a
        # few seconds to be sure, the wait ends there.
        stuck_since: float | None = None
        stuck_for = 2 * self.cfg.lease_seconds + 10
        while time.monotonic() < deadline:
            restarts: list = []
            self._supervise(restarts)
            for _, _, restart in restarts:
                restart()
            rows = self.db.rows("SELECT status, count(*) AS n FROM runs_app_run GROUP BY status")
            by_status = {r["status"]: r["n"] for r in rows}
            busy = self.db.rows(
                "SELECT count(*) AS n FROM sessions_app_session"
                " WHERE status <> 'idle' OR busy_run_id IS NOT NULL"
            )[0]["n"]
            live = sum(n for s, n in by_status.items() if s not in TERMINAL)
            if not live and not busy:
                return True
            if live and not busy:
                stuck_since = stuck_since or time.monotonic()
                if time.monotonic() - stuck_since > stuck_for:
                    self.log(f"chaos: {live} runs have not ended and no session is held: stuck")
                    return False
            else:
                stuck_since = None
            if time.monotonic() - last_print > 15:
                last_print = time.monotonic()
                self.log(f"chaos: settling: runs {by_status}, sessions not idle {busy}")
            time.sleep(0.5)
        return False

    def run(self) -> ChaosReport:
        report = self.report
        self.log(
            f"chaos: seed {self.cfg.seed} (set CHAOS_SEED={self.cfg.seed} to repeat); "
            f"workdir {self.cfg.workdir}"
        )
        started = time.monotonic()
        try:
            self.setup()
            report.timings["setup"] = time.monotonic() - started
            self.log(
                f"chaos: stack up (db {self.stack.db_name}, redis :{self.stack.redis.port}, "
                f"{self.cfg.workers} workers); {self.cfg.runs} runs over {self.cfg.sessions} "
                f"sessions, {self.cfg.fault_seconds:g} s of faults"
            )
            plan = self.plan()
            self.t0 = time.monotonic()
            self._note(f"faults begin (wall clock {time.strftime('%H:%M:%S')})")
            threads = [
                threading.Thread(target=self.approve_loop, name="approver", daemon=True),
                threading.Thread(
                    target=self.fault_loop,
                    args=(self.t0 + self.cfg.fault_seconds,),
                    name="faults",
                    daemon=True,
                ),
            ]
            for t in threads:
                t.start()
            self.drive_runs(plan)
            threads[1].join()
            report.timings["faults"] = time.monotonic() - self.t0
            self.stack.heal()
            self.log(f"chaos: faults over: {dict(report.faults)}; settling")
            settle_start = time.monotonic()
            settled = self.settle()
            report.timings["settle"] = time.monotonic() - settle_start
            if not settled:
                self.log("chaos: not every run ended in time")
            # The last events reach the clients, and a client whose last events were lost (a
            # worker killed between commit and publish) notices the quiet and reads again.
            time.sleep(QUIET_SECONDS + 5.0)
            self.stop_driving.set()
            threads[0].join(10)
            for _, model in self.watchers:
                model.close()
            check_start = time.monotonic()
            Checker(self).check_all()
            report.timings["checks"] = time.monotonic() - check_start
            if self.stack.pool is not None:
                report.notes += self.stack.pool.summary()
        finally:
            self.stop_driving.set()
            for _, model in self.watchers:
                with contextlib.suppress(Exception):
                    model.close()
            for client in self.clients.values():
                client.close()
            if self.db is not None:
                self.db.close()
            keep_db = bool(report.violations) and self.cfg.keep_db
            try:
                self._scan_logs()
                self._keep()
            finally:
                self.stack.stop(keep_db=keep_db)
            if keep_db:
                report.kept_db = self.stack.db_url
        report.timings["total"] = time.monotonic() - started
        return report

    def _keep(self) -> None:
        if not self.report.violations or self.cfg.keep_dir is None:
            return
        kept = self.cfg.keep_dir / f"agentplat-chaos-{self.cfg.seed}-{time.strftime('%H%M%S')}"
        shutil.copytree(self.stack.logs, kept / "logs")
        pool = self.stack.pool
        roots = {"ws": self.stack.workspace} if pool is None else pool.roots
        for name, root in roots.items():
            if root.is_dir():
                shutil.copytree(root, kept / name, ignore=shutil.ignore_patterns(".snapshots"))
        (kept / "report.json").write_text(json.dumps(self.report.as_dict(), indent=1))
        self.report.kept = str(kept)

    def _scan_logs(self) -> None:
        """What the workers said, for the report; each violation gets its run's lines."""
        markers = {
            "lost its lock": "lost its lock",
            "re-enqueued runs with expired leases": "re-enqueued expired leases",
            "lost its database connection": "lost its database connection",
            "crashed in the host": "crashed in the host",
            "lease renewal failed": "lease renewal failed",
            "Traceback": "Traceback",
            "snapshot after step": "snapshot failed",
        }
        logs = self.stack.worker_logs()
        for text in logs.values():
            for needle, name in markers.items():
                count = text.count(needle)
                if count:
                    self.report.log_markers[name] += count
        for v in self.report.violations:
            if not v.run_id:
                continue
            for name, text in sorted(logs.items()):
                for line in text.splitlines():
                    if v.run_id in line and len(v.evidence) < 40:
                        v.evidence.append(f"{name}: {line.strip()[:240]}")


# -- the checks ------------------------------------------------------------------------------------
class Checker:
    def __init__(self, chaos: Chaos) -> None:
        self.chaos = chaos
        self.report = chaos.report
        assert chaos.db is not None
        self.db = chaos.db
        self.workspace = chaos.stack.workspace
        self.pool = chaos.stack.pool  # several hosts (chaos_hosts.py), or None
        self.run_by_id: dict[str, dict] = {}
        self.session_by_id: dict[str, dict] = {}
        self._ws_evidence_next: tuple[ChatModel, str] | None = None

    def check(self, name: str, ok: bool, detail: str = "", **where: str) -> bool:
        self.report.checked[name] += 1
        pending, self._ws_evidence_next = self._ws_evidence_next, None
        if not ok:
            self.report.violate(name, detail, **where)
            session = self.session_by_id.get(where.get("session_id") or "")
            if session is not None:
                self.report.violations[-1].evidence.append(
                    f"session {session['id']}: checkpoint {session['checkpoint']}"
                )
            run = self.run_by_id.get(where.get("run_id") or "")
            if run is not None:
                self.report.violations[-1].evidence.append(
                    f"run {run['id']}: {run['status']}, attempts {run['attempts']}, error "
                    f"{(run['error'] or {}).get('type')}: "
                    f"{((run['error'] or {}).get('message') or '')[:120]}"
                )
            if pending is not None:
                self._ws_evidence(*pending)
        return ok

    def _ws_evidence(self, model: ChatModel, message_id: str) -> None:
        evidence = self.report.violations[-1].evidence
        evidence += [f"shown: {line}" for line in model.journal.get(message_id, [])]
        evidence += [f"socket: {line}" for line in model.connections]

    def check_all(self) -> None:
        db = self.db
        self.runs = db.rows(
            "SELECT id, session_id, status, error, attempts, input, created_at, started_at,"
            " finished_at FROM runs_app_run ORDER BY id"
        )
        self.sessions = db.rows(
            "SELECT id, status, busy_run_id, lease_expires_at, head_id, checkpoint, host,"
            " replicated_snapshot FROM sessions_app_session ORDER BY id"
        )
        self.messages = db.rows(
            "SELECT id, session_id, run_id, parent_id, role, completed_at, error, hidden"
            " FROM sessions_app_message ORDER BY id"
        )
        self.parts = db.rows(
            'SELECT p.id, p.message_id, p.session_id, p."order", p.type, p.text, p.call_id,'
            " p.tool, p.state, p.data, m.run_id FROM sessions_app_part p"
            ' JOIN sessions_app_message m ON m.id = p.message_id ORDER BY p.message_id, p."order"'
        )
        self.run_by_id = {run["id"]: run for run in self.runs}
        self.session_by_id = {s["id"]: s for s in self.sessions}
        for run in self.runs:
            self.report.run_status[run["status"]] += 1
            if run["status"] == "error":
                self.report.run_errors[(run["error"] or {}).get("type", "?")] += 1
        self.check_runs()
        self.check_side_effects()
        self.check_duplicates()
        self.check_sessions()
        self.check_files()
        self.check_websockets()
        self.summarize()

    def summarize(self) -> None:
        """What the violations have in common, where it points at a cause."""
        twice = [v for v in self.report.violations if v.kind == "side-effect-at-most-once"]
        if twice:
            modes = Counter(
                (self.session_by_id.get(v.session_id) or {}).get("checkpoint") for v in twice
            )
            self.report.notes.append(
                "side effects run twice, by the session's checkpoint mode: "
                + ", ".join(f"{m} {n}" for m, n in modes.most_common())
                + f" (sessions per mode: {dict(Counter(s['checkpoint'] for s in self.sessions))})"
            )
        orphans = [
            v
            for v in self.report.violations
            if v.kind == "run-terminal"
            and (self.session_by_id.get(v.session_id) or {}).get("busy_run_id") != v.run_id
        ]
        if orphans:
            self.report.notes.append(
                f"{len(orphans)} runs never ended and their session is not held by them "
                "(no sweep will ever resume them): " + ", ".join(v.run_id for v in orphans[:8])
            )

    def run_summary(self, run_id: str) -> list[str]:
        """The run's messages as stored, each with its parts (tools with their input)."""
        lines = []
        for m in self.messages:
            if m["run_id"] != run_id:
                continue
            shown = []
            for p in self.parts:
                if p["message_id"] != m["id"]:
                    continue
                state = p["state"] or {}
                effect = side_effect_of(p["tool"], state.get("input"))
                shown.append(
                    f"{p['type']}"
                    + (f":{p['tool']}" if p["tool"] else "")
                    + (f"({effect[1]})" if effect else "")
                    + (f"={state.get('status')}" if p["state"] else "")
                )
            lines.append(
                f"message {m['id']} {m['role']} completed {m['completed_at']} error "
                f"{(m['error'] or {}).get('reason')}: {' '.join(shown)}"
            )
        return lines

    # every run terminal; a completed run whole ---------------------------------------------------
    def check_runs(self) -> None:
        parts_of_run: dict[str, list[dict]] = defaultdict(list)
        for p in self.parts:
            parts_of_run[p["run_id"]].append(p)
        messages_of_run: dict[str, list[dict]] = defaultdict(list)
        for m in self.messages:
            messages_of_run[m["run_id"]].append(m)
        sessions = {s["id"]: s for s in self.sessions}
        for run in self.runs:
            if not self.check(
                "run-terminal",
                run["status"] in TERMINAL,
                f"status {run['status']} (attempts {run['attempts']})",
                session_id=run["session_id"],
                run_id=run["id"],
            ):
                s = sessions.get(run["session_id"]) or {}
                evidence = self.report.violations[-1].evidence
                evidence.append(
                    f"its session: {s.get('status')}, busy_run_id {s.get('busy_run_id')}, "
                    f"lease {s.get('lease_expires_at')}, head {s.get('head_id')}"
                )
                evidence += self.run_summary(run["id"])
                evidence += [
                    f"the session's run {r['id']}: {r['status']}, created {_time(r['created_at'])}"
                    f", started {_time(r['started_at'])}, ended {_time(r['finished_at'])}"
                    for r in self.runs
                    if r["session_id"] == run["session_id"]
                ]
            if run["status"] != "completed":
                continue
            unfinished = [
                f"{p['id']} {p['tool']} {(p['state'] or {}).get('status')}"
                for p in parts_of_run[run["id"]]
                if p["type"] == "tool"
                and (p["state"] or {}).get("status") not in ("completed", "error")
            ]
            self.check(
                "completed-run-whole",
                not unfinished,
                f"completed with unfinished tool parts: {unfinished}",
                session_id=run["session_id"],
                run_id=run["id"],
            )
            open_messages = [
                m["id"] for m in messages_of_run[run["id"]] if m["completed_at"] is None
            ]
            self.check(
                "completed-run-whole",
                not open_messages,
                f"completed with unfinished messages: {open_messages}",
                session_id=run["session_id"],
                run_id=run["id"],
            )

    # each side effect at most once --------------------------------------------------------------
    def worktree(self, session_id: str) -> Path | None:
        """Where the session's files are: its home's root with several hosts (None when its
        home is dead), else the one ``WORKSPACE_ROOT``."""
        if self.pool is None:
            return self.workspace / session_id
        home = (self.session_by_id.get(session_id) or {}).get("host") or ""
        return self.pool.worktree(home, session_id)

    def _lines(self, session_id: str, name: str) -> Counter:
        worktree = self.worktree(session_id)
        if self.pool is not None and (worktree is None or not worktree.is_dir()):
            # Re-homed, not claimed since (lazily): its files are the store's.
            session = self.session_by_id.get(session_id) or {}
            return self.pool.lines(session.get("replicated_snapshot") or "", name)
        assert worktree is not None
        path = worktree / name
        try:
            return Counter(path.read_text(errors="replace").splitlines())
        except FileNotFoundError:
            return Counter()

    def check_side_effects(self) -> None:
        files: dict[tuple[str, str], Counter] = {}
        recorded: dict[tuple[str, str], set[str]] = defaultdict(set)
        for p in self.parts:
            if p["type"] != "tool":
                continue
            state = p["state"] or {}
            effect = side_effect_of(p["tool"], state.get("input"))
            if effect is None:
                continue
            name, line = effect
            sid = p["session_id"]
            key = (sid, name)
            if key not in files:
                files[key] = self._lines(sid, name)
            recorded[key].add(line)
            count = files[key][line]
            where = {"session_id": sid, "run_id": p["run_id"] or ""}
            status = state.get("status")
            if not self.check(
                "side-effect-at-most-once",
                count <= 1,
                f"{name}: {line!r} appears {count} times (part {p['id']} {p['tool']} {status})",
                **where,
            ):
                self.report.violations[-1].evidence += self.run_summary(p["run_id"])
            if status == "completed":
                # (More than once is the check above.) Strict with several hosts too: a call
                # whose change a host's loss took is an error that says so, not completed
                # (docs/semantics.md §16.5).
                self.check(
                    "completed-call-ran",
                    count >= 1,
                    f"{name}: {line!r} is not there but its part {p['id']} is completed"
                    + self._lost_note(sid, p["id"]),
                    **where,
                )
            if (state.get("metadata") or {}).get("denied"):
                self.check(
                    "denied-call-never-ran",
                    count == 0,
                    f"{name}: {line!r} appears {count} times but part {p['id']} was denied",
                    **where,
                )
        for sid in {s["id"] for s in self.sessions}:
            for name in SIDE_EFFECT_FILES:
                key = (sid, name)
                lines = files.get(key) or self._lines(sid, name)
                for line in lines:
                    self.check(
                        "side-effect-recorded",
                        line in recorded[key],
                        f"{name}: {line!r} was written but no tool part of the session asked "
                        "for it (a call that ran with no record)",
                        session_id=sid,
                        run_id=self._run_of_tag(line),
                    )

    def _lost_note(self, session_id: str, part_id: str) -> str:
        """(Evidence.) Whether the call's change was not replicated when its host died."""
        if self.pool is None or (session_id, part_id) not in self.pool.lost_calls:
            return ""
        return (
            " (not replicated when its host died: docs/semantics.md §16.5 makes such a call"
            " an error)"
        )

    def _run_of_tag(self, line: str) -> str:
        tag = line.split("-")[0]
        for run in self.runs:
            text = json.dumps(run["input"])
            if tag and (f"{tag} " in text or f"{tag}-" in text):
                return run["id"]
        return ""

    # nothing twice --------------------------------------------------------------------------------
    def check_duplicates(self) -> None:
        orders = Counter((p["message_id"], p["order"]) for p in self.parts)
        for (message_id, order), n in orders.items():
            self.check(
                "part-not-duplicated",
                n == 1,
                f"message {message_id} has {n} parts at order {order}",
            )
        calls = Counter(
            (p["run_id"], p["message_id"], p["call_id"]) for p in self.parts if p["type"] == "tool"
        )
        by_run_call: dict[tuple[str, str], list[str]] = defaultdict(list)
        for (run_id, message_id, call_id), n in calls.items():
            self.check(
                "call-not-duplicated",
                n == 1,
                f"call {call_id} appears {n} times in message {message_id}",
                run_id=run_id or "",
            )
            by_run_call[(run_id, call_id)].append(message_id)
        effects: dict[tuple[str, str, str], list[str]] = defaultdict(list)
        for p in self.parts:
            if p["type"] == "tool":
                effect = side_effect_of(p["tool"], (p["state"] or {}).get("input"))
                if effect:
                    effects[(p["session_id"], *effect)].append(
                        f"{p['id']} ({(p['state'] or {}).get('status')}, message "
                        f"{p['message_id']}, run {p['run_id']})"
                    )
        for (sid, name, line), holders in effects.items():
            self.check(
                "call-not-duplicated",
                len(holders) == 1,
                f"the call appending {line!r} to {name} is in {len(holders)} parts: {holders}",
                session_id=sid,
            )
        users_of_run = Counter(m["run_id"] for m in self.messages if m["role"] == "user")
        for run in self.runs:
            want = len(run["input"] or [])
            n = users_of_run[run["id"]]
            self.check(
                "input-not-duplicated",
                n <= max(want, 1),
                f"{n} user messages for {want} input messages",
                session_id=run["session_id"],
                run_id=run["id"],
            )
        siblings = Counter((m["run_id"], m["parent_id"]) for m in self.messages if m["run_id"])
        for (run_id, parent_id), n in siblings.items():
            self.check(
                "message-not-duplicated",
                n == 1,
                f"{n} messages of the run hang from {parent_id} (two writers of one run?)",
                run_id=run_id,
            )

    # every session idle, its head consistent ------------------------------------------------------
    def path_of(self, session: dict) -> list[dict]:
        by_id = {m["id"]: m for m in self.messages if m["session_id"] == session["id"]}
        path, current = [], session["head_id"]
        while current is not None and current in by_id and len(path) <= len(by_id):
            path.append(by_id[current])
            current = by_id[current]["parent_id"]
        return list(reversed(path))

    def check_sessions(self) -> None:
        runs_of = defaultdict(list)
        for run in self.runs:
            runs_of[run["session_id"]].append(run)
        children = Counter(m["parent_id"] for m in self.messages if m["parent_id"])
        for sid, runs in runs_of.items():
            self.check_queue(sid, runs)
        for s in self.sessions:
            sid = s["id"]
            self.check(
                "session-idle",
                s["status"] == "idle"
                and s["busy_run_id"] is None
                and s["lease_expires_at"] is None,
                f"status {s['status']}, busy_run_id {s['busy_run_id']}, lease "
                f"{s['lease_expires_at']}",
                session_id=sid,
            )
            own = [m for m in self.messages if m["session_id"] == sid]
            if not own:
                self.check(
                    "session-head",
                    s["head_id"] is None,
                    f"no messages but head {s['head_id']}",
                    session_id=sid,
                )
                continue
            path = self.path_of(s)
            if not self.check(
                "session-head",
                bool(path) and path[0]["parent_id"] is None,
                f"head {s['head_id']} does not lead to a root message of the session",
                session_id=sid,
            ):
                continue
            self.check(
                "session-head",
                children[s["head_id"]] == 0,
                f"head {s['head_id']} is not a leaf ({children[s['head_id']]} children)",
                session_id=sid,
            )
            # The driver never branches: every message is on the path, and the newest is the head.
            on_path = {m["id"] for m in path}
            off = [
                f"{m['id']} ({m['role']}, run {m['run_id']})" for m in own if m["id"] not in on_path
            ]
            self.check(
                "session-head",
                not off,
                f"{len(off)} messages off the path to the head (a lost head move or a second "
                f"writer): {off[:6]}",
                session_id=sid,
            )
            newest = max(own, key=lambda m: m["id"])
            self.check(
                "session-head",
                newest["id"] == s["head_id"],
                f"head {s['head_id']} is not the newest message {newest['id']} "
                f"(run {newest['run_id']})",
                session_id=sid,
            )

    def check_queue(self, sid: str, runs: list[dict]) -> None:
        """Every run is enqueued: a session's runs start in the order they were asked for,
        and one ends before the next starts (a run holds its session from ``begin`` to its
        end, waiting for an approval included)."""
        started = sorted((r for r in runs if r["started_at"]), key=lambda r: r["created_at"])
        for before, after in zip(started, started[1:], strict=False):
            self.check(
                "runs-in-order",
                before["started_at"] <= after["started_at"],
                f"{after['id']} (asked at {_time(after['created_at'])}) started at "
                f"{_time(after['started_at'])}, before {before['id']} (asked at "
                f"{_time(before['created_at'])}, started {_time(before['started_at'])})",
                session_id=sid,
                run_id=after["id"],
            )
        by_start = sorted(started, key=lambda r: r["started_at"])
        for before, after in zip(by_start, by_start[1:], strict=False):
            ended = before["finished_at"]
            self.check(
                "runs-one-at-a-time",
                ended is not None and ended <= after["started_at"],
                f"{after['id']} started at {_time(after['started_at'])} while {before['id']} "
                f"({before['status']}, started {_time(before['started_at'])}) had not ended "
                f"(ended {_time(ended)})",
                session_id=sid,
                run_id=before["id"],
            )

    # every file as its last snapshot says ---------------------------------------------------------
    def last_snapshot(self, path: list[dict]) -> str | None:
        """The newest snapshot the path records: the last step's ``step-finish``, or its
        ``step-start`` when it did not finish (a step parked for approval, or stopped)."""
        parts_of: dict[str, list[dict]] = defaultdict(list)
        ids = {m["id"] for m in path}
        for p in self.parts:
            if p["message_id"] in ids:
                parts_of[p["message_id"]].append(p)
        for m in reversed(path):
            for p in reversed(parts_of[m["id"]]):
                if p["type"] in ("step-finish", "step-start") and (p["data"] or {}).get("snapshot"):
                    return p["data"]["snapshot"]
        return None

    def check_files(self) -> None:
        from workspace.snapshots import SnapshotError, Snapshots

        store = self.workspace / ".snapshots"
        last_run = {}
        for run in self.runs:
            last_run[run["session_id"]] = run
        for s in self.sessions:
            sid = s["id"]
            worktree = self.worktree(sid)
            if self.pool is not None:
                if worktree is None or not worktree.is_dir():
                    self._files_in_store(s)
                    continue
                store = worktree.parent / ".snapshots"
            assert worktree is not None
            snap = Snapshots(
                git_dir=store / f"{sid}.git", worktree=worktree, objects=store / "objects"
            )
            recorded = self.last_snapshot(self.path_of(s))
            try:
                now = snap.peek()
            except SnapshotError as exc:
                self.check("files-as-snapshot", False, f"git: {exc}", session_id=sid)
                continue
            if recorded is None:
                files = [p.name for p in worktree.iterdir()] if worktree.exists() else []
                self.check(
                    "files-as-snapshot",
                    not files,
                    f"no snapshot recorded, but the worktree holds {files}",
                    session_id=sid,
                )
                continue
            try:
                changed = snap.patch(recorded, now) if recorded != now else []
            except SnapshotError as exc:  # the recorded tree is not on this host
                lost = self.pool is not None and sid in self.pool.lost_sessions
                self.check("files-as-snapshot", lost, f"git: {exc}", session_id=sid)
                continue
            details = []
            for name in changed[:5]:
                was = snap.read_blob(recorded, name)
                path = worktree / name
                is_now = path.read_bytes() if path.is_file() else None
                details.append(f"{name}: snapshot {_short(was)} / worktree {_short(is_now)}")
            run = last_run.get(sid) or {}
            self.check(
                "files-as-snapshot",
                not changed,
                f"{len(changed)} files differ from the last snapshot {recorded[:10]} (last run "
                f"{run.get('id')} {run.get('status')} {((run.get('error') or {}).get('type'))}): "
                + "; ".join(details),
                session_id=sid,
                run_id=run.get("id", ""),
            )

    def _files_in_store(self, s: dict) -> None:
        """(Several hosts.) A session with no worktree on its home: moved there lazily and not
        run since, or never run. Its files are its replicated snapshot: the last one its
        path records, or one before it when its host died before that one was replicated."""
        assert self.pool is not None
        from workspace.snapshots import EMPTY_TREE

        recorded = self.last_snapshot(self.path_of(s)) or EMPTY_TREE
        replicated = s["replicated_snapshot"] or EMPTY_TREE
        self.check(
            "files-as-snapshot",
            recorded == replicated or s["id"] in self.pool.lost_sessions,
            f"no worktree on its home {s['host']!r}; the store holds {replicated[:10]}, its "
            f"path records {recorded[:10]}",
            session_id=s["id"],
        )

    # what the websocket clients were shown --------------------------------------------------------
    def check_websockets(self) -> None:
        tree: dict[str, dict[str, Any]] = {}
        for m in self.messages:
            tree[m["id"]] = m
        for client, model in self.chaos.watchers:
            sid = model.session_id
            http = self.chaos._http(model.token)
            try:
                reloaded = {m["id"]: m for m in _fetch_path(http, sid)}
            finally:
                http.close()
            shown = model.messages
            for mid, mine in shown.items():
                where = {"session_id": sid, "run_id": mine.get("run_id") or ""}
                if mid not in reloaded:
                    self._ws_evidence_next = (model, mid)
                    self.check(
                        "ws-shown-equals-reload",
                        False,
                        f"{client} shows message {mid} ({mine.get('role')}, "
                        f"{len(mine['parts'])} parts) that "
                        + (
                            "a reload does not show (off the path)"
                            if mid in tree
                            else "the database does not hold"
                        ),
                        **where,
                    )
                    continue
                diffs = _message_diffs(mine, reloaded[mid])
                if not self.check(
                    "ws-shown-equals-reload",
                    not diffs,
                    f"{client}, message {mid}: " + "; ".join(diffs[:6]),
                    **where,
                ):
                    self._ws_evidence(model, mid)
            missing = [mid for mid in reloaded if mid not in shown]
            if not self.check(
                "ws-shown-equals-reload",
                not missing,
                f"{client} never showed {len(missing)} stored messages of the path: {missing[:6]}"
                + "".join(
                    f"; {mid} (run {reloaded[mid]['run_id']}, created "
                    f"{reloaded[mid]['created_at']})"
                    for mid in missing[:3]
                ),
                session_id=sid,
            ):
                self._ws_evidence(model, "")


def _fetch_path(http: httpx.Client, sid: str) -> list[dict[str, Any]]:
    url: str | None = f"/api/sessions/{sid}/messages/?limit=200"
    pages = []
    while url:
        page = http.get(url).json()
        pages.append(page["results"])
        url = page.get("previous")
    return [m for page in reversed(pages) for m in page]


def _last_error(log: Path) -> str:
    """The last CRITICAL or ERROR line of a log, shortened."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "no log"
    for level in ("CRITICAL", "ERROR"):
        for line in reversed(lines):
            if level in line:
                return line.strip()[:200]
    return lines[-1].strip()[:160] if lines else "empty log"


def _time(value: Any) -> str:
    return value.strftime("%H:%M:%S.%f")[:-3] if value is not None else "-"


def _short(data: bytes | None) -> str:
    if data is None:
        return "(none)"
    text = data.decode("utf-8", "replace")
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _message_diffs(shown: dict[str, Any], stored: dict[str, Any]) -> list[str]:
    diffs = []
    for key in ("completed_at", "error"):
        if not shown.get("stub") and shown.get(key) != stored.get(key):
            diffs.append(f"{key} shown {shown.get(key)!r}, stored {stored.get(key)!r}")
    stored_parts = {p["id"]: p for p in stored["parts"]}
    for pid, part in shown["parts"].items():
        if pid not in stored_parts:
            diffs.append(
                f"part {pid} ({part.get('type')} {part.get('tool', '')} "
                f"{(part.get('state') or {}).get('status', '')}) shown, not stored"
            )
            continue
        other = stored_parts[pid]
        if part.get("text") != other.get("text") and other.get("type") in (
            "text",
            "reasoning",
            "compaction",
        ):
            a, b = part.get("text") or "", other.get("text") or ""
            same = len(os.path.commonprefix([a, b]))
            diffs.append(
                f"part {pid} text shown {len(a)} chars, stored {len(b)}, alike for {same}: "
                f"shown …{_clip(a[same:], 40)}, stored …{_clip(b[same:], 40)}"
            )
        mine, theirs = part.get("state") or {}, other.get("state") or {}
        for key in ("status", "output", "error"):
            if mine.get(key) != theirs.get(key):
                diffs.append(
                    f"part {pid} ({other.get('tool')}) {key} shown {_clip(mine.get(key))}, "
                    f"stored {_clip(theirs.get(key))}"
                )
        if (mine.get("approval") or {}).get("status") != (theirs.get("approval") or {}).get(
            "status"
        ):
            diffs.append(
                f"part {pid} approval shown {mine.get('approval')}, stored {theirs.get('approval')}"
            )
    for pid, other in stored_parts.items():
        if pid not in shown["parts"]:
            diffs.append(f"stored part {pid} ({other.get('type')}) never shown")
    return diffs


def _clip(value: Any, n: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def run_chaos(cfg: ChaosConfig) -> ChaosReport:
    return Chaos(cfg).run()


__all__ = ["ChaosConfig", "ChaosReport", "run_chaos", "default_seed", "shell_available"]
