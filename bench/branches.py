"""Branches as workspaces (issue 27): what the branch moves cost.

* **compare**: two branches of a 100-file and of a 50,000-file worktree, each changing 10
  files, ``GET …/compare/`` in this process against ``git diff --stat`` of the same two trees;
  the target is the large case within 1.5x of the small one.
* **alternatives**: one 20-step scripted run through the API, then 8 alternatives of it at
  once (``POST …/alternatives/``), the runs on this process's run host (the embedded layout);
  the target is the 8 within 1.3x of the one's wall time.
* **blame**: a 5,000-line file changed over 200 steps (20 runs of 10 steps; each step a
  ``write`` of the whole file that changes it in one to three places, a block of one to
  eight lines each, as an agent editing a function does). ``GET
  /api/sessions/{id}/blame/<path>`` through the API in this process (token auth, the view,
  the service: the database read of the path, the chain of commits, ``git blame``) against
  the floor: ``git blame --porcelain`` on the equivalent
  commit chain in a plain repository (one commit per step, built with ``git fast-import``).
  The API's answer is checked line by line against the floor's.

The history is built directly (``build_history``), with the rows and snapshots a scripted run
leaves: per step an assistant message with ``step-start`` (the tree before), the ``write``
tool call (its whole content as the input), ``step-finish`` (the tree after) and ``patch``;
the trees are the session's own snapshots (``track`` after each write).
"""

from __future__ import annotations

import random
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .stats import percentile, ratio

LINES = 5000
STEPS = 200
STEPS_PER_RUN = 10
FILE = "src/big.txt"
CHAIN_TIME = 1_700_000_000


def _edit(lines: list[str], rng: random.Random, serial: list[int]) -> list[str]:
    """One step's edit, as an agent edits a file: one to three places, each a block of one to
    eight lines replaced by one to eight new ones (about as many lines in as out)."""
    out = list(lines)

    def fresh() -> str:
        serial[0] += 1
        return f"line {serial[0]}: {rng.choice(WORDS)} {rng.choice(WORDS)} {rng.randrange(10**6)}"

    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(out))
        out[at : at + rng.randint(1, 8)] = [fresh() for _ in range(rng.randint(1, 8))]
    return out


WORDS = ("alpha", "beta", "gamma", "delta", "return", "value", "config", "self", "print", "x")


def contents(lines: int = LINES, steps: int = STEPS, seed: int = 27) -> list[bytes]:
    """The file after each step: the first writes ``lines`` lines, each later one edits."""
    rng = random.Random(seed)
    serial = [0]
    current = [f"line {i}: {rng.choice(WORDS)} {rng.randrange(10**6)}" for i in range(lines)]
    serial[0] = lines
    out = ["\n".join(current) + "\n"]
    for _ in range(steps - 1):
        current = _edit(current, rng, serial)
        out.append("\n".join(current) + "\n")
    return [c.encode() for c in out]


def build_history(
    session: Any, files: list[bytes], *, path: str = FILE, steps_per_run: int = STEPS_PER_RUN
) -> list[str]:
    """Runs on ``session`` whose steps write ``files`` one after the other to ``path``, as
    scripted runs would leave them: the tool part of each step, by step (its id)."""
    from django.db import transaction
    from django.utils import timezone

    from runs_app.models import Run
    from sessions_app.models import Message, Part, Session
    from workspace import snapshots

    snap = snapshots.for_session(session)
    snap.ensure()
    target = session.worktree / path
    target.parent.mkdir(parents=True, exist_ok=True)
    before = snap.track()
    parent = session.head_id
    tool_parts: list[str] = []
    for first in range(0, len(files), steps_per_run):
        batch = files[first : first + steps_per_run]
        with transaction.atomic():
            run = Run.objects.create(
                session=session,
                status=Run.Status.COMPLETED,
                result="stop",
                model="scripted",
                input=[{"role": "user", "content": f"edit {path}"}],
                finished_at=timezone.now(),
            )
            user = Message.objects.create(
                session=session, run_id=run.id, parent_id=parent, role=Message.Role.USER
            )
            Part.objects.create(message=user, session=session, type="text", text=f"edit {path}")
            run.input_message = user
            run.save(update_fields=["input_message"])
            parent = user.id
            for offset, body in enumerate(batch):
                target.write_bytes(body)
                after = snap.track()
                message = Message.objects.create(
                    session=session,
                    run_id=run.id,
                    parent_id=parent,
                    role=Message.Role.ASSISTANT,
                    model="scripted",
                    completed_at=timezone.now(),
                )
                text = body.decode()
                now = time.time()
                rows = [
                    Part(type="step-start", data={"snapshot": before, "step": offset}),
                    Part(
                        type="tool",
                        call_id=f"call_{first + offset}",
                        tool="write",
                        state={
                            "status": "completed",
                            "input": {"path": path, "content": text},
                            "output": f"Wrote {len(body)} bytes to {path}.",
                            "error": None,
                            "metadata": {},
                            "time": {"start": now, "end": now},
                        },
                    ),
                    Part(type="step-finish", data={"snapshot": after, "step": offset}),
                    Part(
                        type="patch", data={"snapshot": before, "files": snap.patch(before, after)}
                    ),
                ]
                for order, part in enumerate(rows):
                    part.message, part.session, part.order = message, session, order
                Part.objects.bulk_create(rows)
                tool_parts.append(rows[1].id)
                parent, before = message.id, after
            Session.objects.filter(id=session.id).update(head_id=parent)
    session.refresh_from_db()
    return tool_parts


def _git(cwd: Path, *args: str, input: bytes | None = None) -> bytes:
    from .repo import _plain_env

    return subprocess.run(
        ["git", *args], cwd=cwd, env=_plain_env(), input=input, check=True, capture_output=True
    ).stdout


def floor_repo(files: list[bytes], where: Path, *, path: str = FILE) -> Path:
    """A plain repository with one commit per step (message ``step <i>``): the equivalent
    commit chain."""
    repo = where / "floor"
    _git(where, "init", "-q", "-b", "main", str(repo))
    stream = bytearray()
    for i, body in enumerate(files):
        message = f"step {i}".encode()
        stream += f"commit refs/heads/main\nmark :{i + 1}\n".encode()
        stream += f"committer bench <bench@example.invalid> {CHAIN_TIME + i} +0000\n".encode()
        stream += b"data %d\n%s\n" % (len(message), message)
        if i:
            stream += f"from :{i}\n".encode()
        stream += f"M 100644 inline {path}\n".encode() + b"data %d\n%s\n" % (len(body), body)
    _git(repo, "fast-import", "--quiet", input=bytes(stream))
    return repo


def floor_blame(repo: Path, *, path: str = FILE) -> list[int]:
    """The step of each line, from ``git blame --porcelain`` on the floor chain."""
    out = _git(repo, "blame", "--porcelain", "main", "--", path).decode()
    summaries: dict[str, int] = {}
    steps: list[int] = []
    current = ""
    for line in out.split("\n"):
        fields = line.split(" ")
        if len(fields) >= 3 and len(fields[0]) == 40 and fields[1].isdigit():
            current = fields[0]
        elif line.startswith("summary step "):
            summaries[current] = int(line.removeprefix("summary step "))
        elif line.startswith("\t"):
            steps.append(current)  # type: ignore[arg-type]
    return [summaries[c] for c in steps]  # type: ignore[index]


def per_line(runs: list[dict], tool_parts: list[str]) -> list[int | None]:
    """The step of each line, from the API's runs."""
    step_of = {part: i for i, part in enumerate(tool_parts)}
    out: list[int | None] = []
    for run in runs:
        out += [step_of.get(run["part_id"])] * (run["end"] - run["start"] + 1)
    return out


def _ms(fn: Any) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000.0


def _summary(times: list[float]) -> dict[str, float]:
    return {"p50_ms": percentile(times, 50), "p99_ms": percentile(times, 99), "samples": len(times)}


def run_blame(*, quick: bool = False) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from sessions_app.services.sessions import create_session

    samples = 30 if quick else 200
    user, _ = User.objects.get_or_create(username="branches-bench")
    token, _ = Token.objects.get_or_create(user=user)
    session = create_session(owner=user, title="blame bench")
    files = contents()
    started = time.perf_counter()
    tool_parts = build_history(session, files)
    build_s = time.perf_counter() - started
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    url = f"/api/sessions/{session.id}/blame/{FILE}"
    answers: list[Any] = []

    def call() -> None:
        response = client.get(url)
        assert response.status_code == 200, response.content[:500]
        answers.append(response.json())

    first_ms = _ms(call)  # the chain's objects written
    api_times = [_ms(call) for _ in range(samples)]
    with tempfile.TemporaryDirectory(prefix="bench-blame-") as scratch:
        repo = floor_repo(files, Path(scratch))
        floor_blame(repo)
        floor_times = [_ms(lambda: floor_blame(repo)) for _ in range(samples)]
        expected = floor_blame(repo)
    got = per_line(answers[-1], tool_parts)
    api, floor = _summary(api_times), _summary(floor_times)
    return {
        "lines": len(files[-1].splitlines()),
        "steps": len(files),
        "runs_in_answer": len(answers[-1]),
        "build_s": build_s,
        "first_ms": first_ms,
        "api": api,
        "floor": floor,
        "ratio_p50": ratio(api["p50_ms"], floor["p50_ms"]),
        "ratio_p99": ratio(api["p99_ms"], floor["p99_ms"]),
        "exact": got == expected,
        "lines_differing": sum(a != b for a, b in zip(got, expected, strict=False))
        + abs(len(got) - len(expected)),
        "target_p50_ms": 300,
    }


# -- compare -----------------------------------------------------------------------------------
def _branch(session: Any, parent: str | None, before: str, after: str, label: str) -> str:
    """A user message and an assistant step from ``before`` to ``after`` under ``parent``:
    the leaf's id (the rows a scripted run leaves, without the run)."""
    from sessions_app.models import Message, Part

    user = Message.objects.create(session=session, parent_id=parent, role="user")
    Part.objects.create(message=user, session=session, type="text", text=label)
    answer = Message.objects.create(session=session, parent_id=user.id, role="assistant")
    rows = [
        Part(type="step-start", data={"snapshot": before, "step": 0}),
        Part(type="step-finish", data={"snapshot": after, "step": 0}),
    ]
    for order, part in enumerate(rows):
        part.message, part.session, part.order = answer, session, order
    Part.objects.bulk_create(rows)
    return answer.id


def _compare_case(user: Any, client: Any, files: int, changed: int, samples: int) -> dict:
    """Two branches of a ``files``-file worktree, each changing ``changed`` files (different
    ones): ``GET …/compare/`` against ``git diff --stat`` of the same two trees."""
    from sessions_app.services.sessions import create_session
    from workspace import snapshots

    session = create_session(owner=user, title=f"compare {files}")
    snap = snapshots.for_session(session)
    snap.ensure()
    root = session.worktree
    for i in range(files):
        path = root / f"d{i % 100:02d}" / f"f{i:05d}.txt"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"file {i}\n" * 20)
    base = snap.track()
    trees = []
    for side in range(2):
        snap.restore(base)
        for i in range(changed):
            n = (side * changed + i) * (files // (2 * changed))
            (root / f"d{n % 100:02d}" / f"f{n:05d}.txt").write_text(f"side {side}\n")
        trees.append(snap.track())
    a = _branch(session, None, base, trees[0], "a")
    b = _branch(session, None, base, trees[1], "b")
    url = f"/api/sessions/{session.id}/compare/?a={a}&b={b}"

    def call() -> None:
        response = client.get(url)
        assert response.status_code == 200, response.content[:300]
        assert len(response.json()["files"]) == 2 * changed

    call()
    api = _summary([_ms(call) for _ in range(samples)])
    floor = _summary(
        [_ms(lambda: snap.git("diff", "--stat", trees[0], trees[1])) for _ in range(samples)]
    )
    return {"files": files, "changed": changed, "api": api, "floor": floor}


def run_compare(*, quick: bool = False) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    user, _ = User.objects.get_or_create(username="branches-bench-compare")
    token, _ = Token.objects.get_or_create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    samples = 10 if quick else 50
    large = 5_000 if quick else 50_000
    small_case = _compare_case(user, client, 100, 10, samples)
    large_case = _compare_case(user, client, large, 10, samples)
    return {
        "small": small_case,
        "large": large_case,
        "ratio_p50": ratio(large_case["api"]["p50_ms"], small_case["api"]["p50_ms"]),
        "target_ratio": 1.5,
    }


# -- alternatives ------------------------------------------------------------------------------
def _script(steps: int, pace_ms: int) -> str:
    lines = []
    for i in range(steps):
        lines += [
            f"say step {i} of the work: reading and then writing one file",
            f"write out/{i}.txt {i}",
        ]
    return f"pace {pace_ms}\n" + "\n".join(lines) + "\nsay finished"


def _alternatives_at(client: Any, sid: str, steps: int, n: int, pace_ms: int) -> dict[str, Any]:
    from runs_app.models import Run
    from sessions_app.models import Message

    started = time.perf_counter()
    one = client.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"role": "user", "content": _script(steps, pace_ms)}], "wait": True},
        format="json",
    ).json()
    one_s = time.perf_counter() - started
    assert one["status"] == "completed", one
    message = Message.objects.filter(session_id=sid, role="user").order_by("id").last()
    started = time.perf_counter()
    answer = client.post(
        f"/api/sessions/{sid}/alternatives/", {"message_id": message.id, "n": n}, format="json"
    ).json()
    forks = answer["sessions"]
    while Run.objects.filter(session_id__in=forks).exclude(status__in=Run.TERMINAL).exists():
        time.sleep(0.02)
    all_s = time.perf_counter() - started
    runs = Run.objects.filter(session_id__in=forks)
    return {
        "pace_ms": pace_ms,
        "one_s": one_s,
        "all_s": all_s,
        "ratio": ratio(all_s, one_s),
        "statuses": sorted(set(runs.values_list("status", flat=True))),
    }


def run_alternatives(*, quick: bool = False) -> dict[str, Any]:
    """One 20-step scripted run, then 8 alternatives of it started at once (each its own fork
    and worktree: the forks' making is in the time), through the API, the runs on this
    process's run host (the embedded layout): the wall time of all 8 against one. Twice: the
    model streaming at 30 ms a word (about a hosted model's pace: the runs mostly wait, as
    real ones do), and at 5 ms a word, where the 8 runs' own work (snapshots, rows, events)
    is what is measured on this machine's 2 cores: the unfavoured figure."""
    from django.conf import settings
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    settings.RUN_EXECUTOR = "thread"
    steps, n = (5, 4) if quick else (20, 8)
    user, _ = User.objects.get_or_create(username="branches-bench-alternatives")
    token, _ = Token.objects.get_or_create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    out: dict[str, Any] = {"steps": steps, "n": n, "target_ratio": 1.3}
    for name, pace in (("paced", 30), ("cpu_bound", 5)):
        sid = client.post("/api/sessions/", {"title": f"alternatives {name}"}, format="json")
        out[name] = _alternatives_at(client, sid.json()["id"], steps, n, pace)
    return out


def run(env: Any, *, quick: bool = False) -> dict[str, Any]:
    return {
        "blame": run_blame(quick=quick),
        "compare": run_compare(quick=quick),
        "alternatives": run_alternatives(quick=quick),
    }


def report(r: dict[str, Any]) -> str:
    from .__main__ import _f, _table

    out = []
    b = r.get("blame")
    if b:
        rows = [
            [
                "GET /api/sessions/{id}/blame/<path> (in process)",
                _f(b["api"]["p50_ms"]),
                _f(b["api"]["p99_ms"]),
                f"{_f(b['ratio_p50'], 1)}x",
                f"{_f(b['ratio_p99'], 1)}x",
            ],
            [
                "floor: git blame --porcelain, equivalent commit chain",
                _f(b["floor"]["p50_ms"]),
                _f(b["floor"]["p99_ms"]),
                "-",
                "-",
            ],
        ]
        out.append(
            _table(
                f"Blame: a {b['lines']:,}-line file changed over {b['steps']} steps "
                f"({b['api']['samples']} calls each)",
                ["", "p50 ms", "p99 ms", "p50 / floor", "p99 / floor"],
                rows,
                f"target p50 <= {b['target_p50_ms']} ms: "
                f"{'met' if b['api']['p50_ms'] <= b['target_p50_ms'] else 'not met'}; "
                "first call (writes the chain) "
                f"{_f(b['first_ms'])} ms; answer: {b['runs_in_answer']:,} runs of lines, "
                f"{'the same step for every line as the floor' if b['exact'] else 'DIFFERS'}"
                f" ({b['lines_differing']} lines differ); history built in {_f(b['build_s'], 1)} s",
            )
        )
    c = r.get("compare")
    if c:
        rows = [
            [
                f"GET …/compare/, {case['files']:,} files ({2 * case['changed']} differ)",
                _f(case["api"]["p50_ms"]),
                _f(case["api"]["p99_ms"]),
                _f(case["floor"]["p50_ms"]),
                f"{_f(ratio(case['api']['p50_ms'], case['floor']['p50_ms']), 1)}x",
            ]
            for case in (c["small"], c["large"])
        ]
        out.append(
            _table(
                "Compare: two branches differing in 10 files each (floor: git diff --stat of the "
                "two trees)",
                ["", "p50 ms", "p99 ms", "floor p50 ms", "p50 / floor"],
                rows,
                f"large / small p50: {_f(c['ratio_p50'], 2)}x (target <= {c['target_ratio']}x: "
                f"{'met' if c['ratio_p50'] <= c['target_ratio'] else 'not met'})",
            )
        )
    a = r.get("alternatives")
    if a:
        rows = []
        for name, label in (("paced", "a model's pace"), ("cpu_bound", "unfavoured: CPU-bound")):
            case = a[name]
            rows.append(
                [
                    f"{label} ({case['pace_ms']} ms a word)",
                    _f(case["one_s"], 2),
                    _f(case["all_s"], 2),
                    f"{_f(case['ratio'], 2)}x",
                    "met" if case["ratio"] <= a["target_ratio"] else "not met",
                ]
            )
        out.append(
            _table(
                f"Alternatives: {a['n']} of a {a['steps']}-step scripted run at once (the "
                "embedded layout: runs on this process's run host; the forks' making included)",
                ["", "one run s", f"{a['n']} at once s", "ratio", f"<= {a['target_ratio']}x"],
                rows,
                "runs ended: "
                + "; ".join(", ".join(a[k]["statuses"]) for k in ("paced", "cpu_bound")),
            )
        )
    return "\n\n".join(out)
