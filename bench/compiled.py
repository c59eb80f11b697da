"""Compiled statements (``core/compiled.py``) against the plain ORM, side by side in one run
(issue 44, item 4).

Each path that runs a statement of ``core/compiled.py`` is called as its code calls it, in
this process against PostgreSQL (the harness's database, as ``DATABASE_URL`` names it), in
blocks of ``BLOCK`` calls: alternately as deployed (the statements compiled) and with every
statement built and run by the ORM each time (``core.compiled.plain_orm``: what the code
costs without that module). Each block runs inside a transaction rolled back at its end, so
every block sees the same rows; the first round of blocks warms up (compiles) and is not
counted. CPU is this process's (``time.process_time``): the client's side of a statement
(building, compiling, sending, converting), the part the module saves; PostgreSQL's own is
the same both ways. A statement stays compiled where it saves at least ``KEEP`` of its path's
CPU (the call below: the function that runs it, as its caller calls it).

Two whole paths put the statements in proportion: a run request (``start_run``, the web
process's) and a run's ``begin`` (the worker's).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

KEEP = 0.20  # the least share of a path's CPU that keeps its statement compiled
BLOCK = 100
PATH = 20  # messages of the session's path, 3 parts each
ASK = [{"role": "user", "content": "say hi"}]
USAGE = {"input_tokens": 120, "output_tokens": 30, "cost_usd": "0.0012"}


class _Rollback(Exception):
    pass


@dataclass(frozen=True)
class Case:
    path: str  # the file whose statements these are
    call: str  # what is called, as its caller calls it
    statement: str  # the compiled statement(s) it runs (core/compiled.py)
    make: Callable[[int], Callable[[], Any]]  # ``count`` calls' rows made, then one call


def _cycle(*calls: Callable[[], Any]) -> Callable[[], Any]:
    """One call after another, round and round."""
    turn = iter(range(1 << 62))
    return lambda: calls[next(turn) % len(calls)]()


def _each(items: list[Any], call: Callable[[Any], Any]) -> Callable[[], Any]:
    """``call`` of the next of ``items`` (made before the block: not timed)."""
    rows: Iterator[Any] = iter(items)
    return lambda: call(next(rows))


@dataclass
class World:
    """The rows every case reads or writes, committed before any block."""

    user: Any
    key: str
    session: Any  # busy: held by ``held``, ``queued`` behind it
    held: Any
    queued: Any
    path: list[str]  # the session's path, root → head: PATH messages of 3 parts each
    part: Any
    fresh: list[Any]  # idle sessions, one per call of a run request
    pending: list[Any]  # runs asked for in sessions of their own, not begun: one per begin


def _world() -> World:
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    from runs_app.services.runs import start_run
    from sessions_app.models import Message, Part, Session
    from sessions_app.services.sessions import create_session

    user = User.objects.create_user("bench-compiled", password="x")
    key = Token.objects.create(user=user).key
    session = create_session(owner=user, title="compiled")
    parent = None
    path = []
    for i in range(PATH):
        message = Message.objects.create(
            session=session, role="user" if i % 2 == 0 else "assistant", parent=parent
        )
        for order, kind in enumerate(("step-start", "text", "tool")):
            Part.objects.create(
                message=message,
                session=session,
                order=order,
                type=kind,
                text="a line of the answer\n" * 5 if kind == "text" else "",
                tool="read" if kind == "tool" else "",
                call_id=f"c{i}" if kind == "tool" else "",
                state={"status": "completed", "input": {"path": "a.py"}, "output": "x" * 200}
                if kind == "tool"
                else None,
                data={"snapshot": "0" * 40} if kind == "step-start" else {},
            )
        Message.objects.create(session=session, role="assistant", parent=parent)  # a branch
        path.append(message.id)
        parent = message
    Session.objects.filter(id=session.id).update(head_id=parent.id)
    session.refresh_from_db()
    held = start_run(session=session, user=user, messages=ASK, defer_enqueue=True)
    queued = start_run(
        session=session,
        user=user,
        messages=ASK,
        multitask_strategy="enqueue",
        defer_enqueue=True,
    )
    fresh = [create_session(owner=user, title=f"fresh {i}") for i in range(BLOCK)]
    pending = [
        start_run(session=s, user=user, messages=ASK, defer_enqueue=True)
        for s in (create_session(owner=user, title=f"begin {i}") for i in range(BLOCK))
    ]
    part = Part.objects.filter(message_id=path[-1], type="text").get()
    session.refresh_from_db()
    return World(user, key, session, held, queued, path, part, fresh, pending)


LOCK, LIFECYCLE, CHECKPOINT = (
    "sessions_app/services/lock.py",
    "runs_app/lifecycle.py",
    "runs_app/checkpoint.py",
)
READS, QUOTAS, TOKEN = "selectors", "quotas_app", "sessions_app/api/token_auth.py"


def _lock_cases(w: World) -> list[Case]:
    from sessions_app.services import lock

    sid, held, queued = w.session.id, w.held.id, w.queued.id
    handed = _cycle(
        lambda: lock.hand_over(sid, held, queued), lambda: lock.hand_over(sid, queued, held)
    )
    end = {"head_id": w.path[-1], "usage": USAGE}
    return [
        Case(LOCK, "lock_session", "_LOCK", lambda n: lambda: lock.lock_session(sid)),
        Case(
            LOCK,
            "lock_session_of_run",
            "_LOCK_OF_RUN",
            lambda n: lambda: lock.lock_session_of_run(held),
        ),
        Case(LOCK, "claim (own or free)", "_CLAIM", lambda n: lambda: lock.claim(sid, held)),
        Case(
            LOCK,
            "claim (expired only)",
            "_CLAIM_EXPIRED",
            lambda n: lambda: lock.claim(sid, held, own_ok=False),
        ),
        Case(LOCK, "hand_over (to the next run)", "_HAND_OVER", lambda n: handed),
        Case(
            LOCK,
            "hand_over (release, with the end's fields)",
            "_HAND_OVER",
            lambda n: lambda: lock.hand_over(sid, held, None, also=end),
        ),
    ]


def _moves(w: World) -> Callable[[], Any]:
    """``begin``'s, ``park``'s and ``resume``'s moves of one run, in turn (each moves it)."""
    from django.utils import timezone

    from runs_app.lifecycle import move
    from runs_app.models import Run

    S, run, epoch = Run.Status, w.queued.id, [w.queued.lease_epoch]

    def begin() -> int:
        epoch[0] += 1
        at = timezone.now()
        return move(
            run,
            S.PENDING,
            S.RUNNING,
            new_epoch=True,
            unless_aborted=True,
            started_at=at,
            attempts=1,
        )

    def park() -> int:
        return move(run, S.RUNNING, S.REQUIRES_ACTION, epoch=epoch[0], usage=USAGE)

    return _cycle(begin, park, lambda: move(run, S.REQUIRES_ACTION, S.PENDING))


def _lifecycle_cases(w: World) -> list[Case]:
    from runs_app import lifecycle
    from runs_app.models import Run

    sid, held = w.session.id, w.held.id

    def new_runs(count: int) -> Callable[[], Any]:
        runs = [Run(session_id=sid, input=ASK, model="scripted") for _ in range(count)]
        return _each(runs, lambda run: lifecycle._INSERT_RUN.insert([run]))

    def queued() -> Any:
        return next(iter(lifecycle._QUEUED.rows(session_id=sid, run_id=held)), None)

    return [
        Case(LIFECYCLE, "move (begin, park, resume in turn)", "_MOVES", lambda n: _moves(w)),
        Case(LIFECYCLE, "the next queued run (an end's)", "_QUEUED", lambda n: queued),
        Case(LIFECYCLE, "a run's INSERT (admit)", "_INSERT_RUN", new_runs),
    ]


def _read_cases(w: World) -> list[Case]:
    from quotas_app.limits import effective
    from runs_app.selectors import run_row
    from sessions_app.api.token_auth import TokenAuthentication
    from sessions_app.selectors import messages_with_parts, path_ids, session_for_user

    sid, auth = w.session.id, TokenAuthentication()
    return [
        Case(READS, "run_row (begin's read)", "_RUN", lambda n: lambda: run_row(w.held.id)),
        Case(
            READS,
            "session_for_user (every session request)",
            "_OWN_SESSION",
            lambda n: lambda: session_for_user(w.user, sid),
        ),
        Case(
            READS,
            f"path_ids ({2 * PATH}-message tree)",
            "_TREE",
            lambda n: lambda: path_ids(w.path[-1], sid),
        ),
        Case(
            READS,
            f"messages_with_parts ({PATH} messages, {3 * PATH} parts)",
            "_MESSAGES, _PARTS",
            lambda n: lambda: messages_with_parts(w.path),
        ),
        Case(QUOTAS, "effective (limits)", "_QUOTA_ROWS", lambda n: lambda: effective(w.user.pk)),
        Case(
            TOKEN,
            "authenticate_credentials",
            "_USER_OF_TOKEN",
            lambda n: lambda: auth.authenticate_credentials(w.key),
        ),
    ]


def _new_rows(w: World, count: int) -> Callable[[], Any]:
    """A step's new rows, a message and 3 parts, ``count`` times (made before the block)."""
    from runs_app import checkpoint
    from sessions_app.models import Message, Part

    sid, made = w.session.id, []
    for _ in range(count):
        message = Message(session_id=sid, role="assistant", parent_id=w.path[-1], run_id=w.held.id)
        tool = {"status": "pending", "input": {"path": "a.py"}}
        parts = [
            Part(message=message, session_id=sid, order=0, type="step-start", data={}),
            Part(message=message, session_id=sid, order=1, type="text", text="hello " * 20),
            Part(message=message, session_id=sid, order=2, type="tool", tool="read", state=tool),
        ]
        made.append((message, parts))

    def insert(rows: tuple[Any, list[Any]]) -> None:
        checkpoint._MESSAGES.insert([rows[0]])
        checkpoint._PARTS.insert(rows[1])

    return _each(made, insert)


def _write_cases(w: World) -> list[Case]:
    from django.utils import timezone

    from quotas_app.services import record_usage, usage_record
    from runs_app import checkpoint

    sid, now, part = w.session.id, timezone.now(), w.part

    def records(count: int) -> Callable[[], Any]:
        made = [
            usage_record(
                user_id=w.user.pk,
                session_id=sid,
                run_id=w.held.id,
                message_id=f"msg_bench_{i}",
                model="scripted",
                usage=USAGE,
            )
            for i in range(count)
        ]
        return _each(made, lambda record: record_usage([record]))

    def changed() -> None:
        part.text += "x"
        checkpoint._write_changed(part, {"text", "state"})

    head = {"head_id": w.path[-1], "updated_at": now}
    return [
        Case(
            CHECKPOINT,
            "the head (every flush)",
            "_SET_HEAD",
            lambda n: lambda: checkpoint._SET_HEAD.update(head, id=sid),
        ),
        Case(
            CHECKPOINT,
            "new rows: a message and 3 parts",
            "_MESSAGES, _PARTS (insert)",
            lambda n: _new_rows(w, n),
        ),
        Case(CHECKPOINT, "changed fields (a part's text, state)", "_CHANGED", lambda n: changed),
        Case(QUOTAS, "record_usage (one record)", "_RECORDS", records),
    ]


def _whole_cases(w: World) -> list[Case]:
    from runs_app import lifecycle
    from runs_app.services.runs import start_run

    def request(session: Any) -> Any:
        return start_run(session=session, user=w.user, messages=ASK, defer_enqueue=True)

    return [
        Case(
            "whole path",
            "a run request (start_run)",
            "_LOCK, _QUOTA_ROWS, _INSERT_RUN, _CLAIM",
            lambda n: _each(w.fresh[:n], request),
        ),
        Case(
            "whole path",
            "a run's begin (lifecycle.begin)",
            "_LOCK_OF_RUN, _RUN, _CLAIM, _MOVES",
            lambda n: _each([r.id for r in w.pending[:n]], lifecycle.begin),
        ),
    ]


def _cases(w: World) -> list[Case]:
    return [
        *_lock_cases(w),
        *_lifecycle_cases(w),
        *_read_cases(w),
        *_write_cases(w),
        *_whole_cases(w),
    ]


def _block(case: Case, count: int, plain: bool) -> float:
    """CPU µs per call of ``count`` calls, in a transaction rolled back."""
    from django.db import transaction

    from core.compiled import plain_orm

    call = case.make(count)
    spent = 0.0
    try:
        with transaction.atomic(), plain_orm() if plain else nullcontext():
            started = time.process_time()
            for _ in range(count):
                call()
            spent = time.process_time() - started
            raise _Rollback
    except _Rollback:
        pass
    return spent / count * 1e6


def measure(case: Case, rounds: int, count: int = BLOCK) -> dict[str, Any]:
    """Blocks of ``count`` calls, the ORM's and the compiled, alternately (which goes first
    alternates too); the first round not counted. The median block of each."""
    times: dict[str, list[float]] = {"orm": [], "compiled": []}
    for r in range(rounds + 1):
        for plain in (True, False) if r % 2 == 0 else (False, True):
            spent = _block(case, count, plain)
            if r:
                times["orm" if plain else "compiled"].append(spent)
    orm, compiled = statistics.median(times["orm"]), statistics.median(times["compiled"])
    saving = 1 - compiled / orm if orm else 0.0
    return {
        "path": case.path,
        "call": case.call,
        "statement": case.statement,
        "orm_us": orm,
        "compiled_us": compiled,
        "ratio": compiled / orm if orm else float("nan"),
        "saving": saving,
        "keep": saving >= KEEP,
        "blocks": rounds,
        "calls_each": count,
    }


def run(env: Any, *, quick: bool = False) -> dict[str, Any]:
    import django

    rounds = 4 if quick else 10
    world = _world()
    rows = [measure(case, rounds) for case in _cases(world)]
    return {"rows": rows, "rounds": rounds, "block": BLOCK, "django": django.get_version()}


def report(r: dict[str, Any]) -> str:
    from .__main__ import _table

    rows = [
        [
            f"{row['path']}: {row['call']}",
            row["statement"],
            f"{row['orm_us']:,.0f}",
            f"{row['compiled_us']:,.0f}",
            f"{row['ratio']:.2f}",
            f"{100 * row['saving']:.0f}%",
            ("keep" if row["keep"] else "plain ORM") if row["path"] != "whole path" else "",
        ]
        for row in r["rows"]
    ]
    return _table(
        "Compiled statements against the plain ORM (CPU µs per call of this process, "
        "median of the blocks)",
        ["path: call", "statement", "ORM µs", "compiled µs", "ratio", "saving", ""],
        rows,
        f"{r['rounds']} blocks of {r['block']} calls each way, alternately, each in a "
        f"transaction rolled back; Django {r['django']}; keep: saves ≥ {100 * KEEP:.0f}%",
    )
