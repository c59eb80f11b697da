"""The package diagram of docs/architecture.md, drawn from the code's imports.

    .venv/bin/python -m scripts.architecture          # rewrite the diagram in the doc
    .venv/bin/python -m scripts.architecture --check  # exit 1 when the doc is not current

An arrow ``a --> b`` means some module of package ``a`` imports some module of ``b`` (every
import statement, function-level ones too, as grimp reads them), labelled with how many
module pairs do. ``LAYERS`` is the direction the packages may import in, top to bottom;
tests/test_structure.py enforces it and tests/test_architecture_doc.py that the doc's
diagram is the code's.

The doc's second made section is **the walk** (``WALK``): a run's id from ``POST …/runs/`` to
the first ``text-delta`` on the browser's socket, module by module. Written by hand here, it
is checked against the code (``walk_problems``, run by tests/test_structure.py): each call
is an import of the callee by the caller, and the callee never reaches the caller back, so
the walk goes down the floors; where the id changes hands without an import (a queue, the
broker, the channel layer), the sender does not reach the receiver either: the next
process's part starts again at its entry point (the Celery task, the socket's consumer).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- diagram: made by scripts/architecture.py from the code; do not edit -->"
END = "<!-- end of diagram -->"
WALK_BEGIN = "<!-- walk: made by scripts/architecture.py (WALK), checked against the code -->"
WALK_END = "<!-- end of walk -->"

# Top to bottom: a package imports only packages of lower layers (never one of its own layer,
# never one above). Siblings in one layer know nothing of each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("config",),
    ("runs_app",),
    ("sessions_app",),
    ("quotas_app", "api"),
    ("realtime", "workspace"),
    ("core",),
)
PACKAGES = tuple(p for layer in LAYERS for p in layer)


def edges() -> Counter[tuple[str, str]]:
    graph = grimp.build_graph(*PACKAGES)
    counted: Counter[tuple[str, str]] = Counter()
    for module in graph.modules:
        here = module.split(".")[0]
        for imported in graph.find_modules_directly_imported_by(module):
            there = imported.split(".")[0]
            if there != here and there in PACKAGES:
                counted[(here, there)] += 1
    return counted


def diagram() -> str:
    lines = [BEGIN, "", "```mermaid", "flowchart TD"]
    for layer in LAYERS:
        for package in layer:
            lines.append(f"    {package}[{package}]")
    for (a, b), n in sorted(edges().items()):
        lines.append(f"    {a} -->|{n}| {b}")
    lines += ["```", "", END]
    return "\n".join(lines)


# The walk: (module, what it does with the run, how the run goes on to the next step's module:
# "call" — the module imports it and calls it; else the hand-off that carries the id without
# an import). Services mode; embedded mode differs at step 5 only (the hand-off is the
# runtime's local queue, taken by the host's intake thread in the same process).
WALK: tuple[tuple[str, str, str], ...] = (
    (
        "config.urls",
        "`POST /api/sessions/<id>/runs/` routes to `SessionRunViewSet.create`.",
        "call",
    ),
    (
        "runs_app.api.views",
        "`SessionRunViewSet.create`: the session fetched for its owner (404 for anyone else), "
        "the body validated once (`RunIn`), then `answer` (202, or 200 once ended with "
        "`wait`) around `run_services.start_run`.",
        "call",
    ),
    (
        "runs_app.services.runs",
        "`start_run`: the session row locked (`lock.lock_session`), the `Run` built — **its id "
        "is made here** (`runs_app.models.run_id`, the field's default) — and admitted.",
        "call",
    ),
    (
        "runs_app.lifecycle",
        "`admit`: the run inserted, the session's busy lock claimed for it (`lock.claim`: "
        "`busy_run_id` is the run's id, with a lease), `run.updated` said on commit, and "
        "`runtime.enqueue_on_commit(run.id)`.",
        "call",
    ),
    (
        "runs_app.execution.runtime",
        "`enqueue`, once the transaction commits: the Celery task `runs_app.run_agent` sent "
        "by name with the run's id as its task id (`core.mode.send_task`); in embedded mode "
        "the id goes on the local queue (`local_runs`).",
        "the broker (Redis): a worker receives the task",
    ),
    (
        "runs_app.tasks",
        "`run_agent_task(run_id)`: hands the id to the worker's run host and returns once the "
        "run has begun (a waiting run holds no Celery slot).",
        "call",
    ),
    (
        "runs_app.execution.host",
        "`RunHost.submit` → `_host`: room among `RUN_HOST_CAPACITY` live runs, a few start-ups "
        "at a time, `lifecycle.begin(run_id)` in a database thread (pending → running, this "
        "execution's lease epoch; the keeper renews the lease from now on), then `_carry`: "
        "the run's `RunControl`, its abort-bus registration, and the loop.",
        "call",
    ),
    (
        "runs_app.execution.loop.run",
        "`execute`: the run's `RunContext` (writer fenced by the epoch, provider, tools, "
        "snapshots); `phases`: the owner's limits, `start.start_up` (the path, the user "
        "message written, the files' snapshot), then `steps.run_steps`.",
        "call",
    ),
    (
        "runs_app.execution.loop.steps",
        "`step`: the snapshot before, the assistant message and its `step-start` "
        "(`recorder`), then the model's stream.",
        "call",
    ),
    (
        "runs_app.execution.loop.model",
        "`stream`: the provider's stream (`ctx.provider.astream`); at the first `TextDelta` "
        "the text part is made (`recorder.new_part`), and the token published at once — the "
        "one event that does not wait for its row (its text is stored each "
        "`STREAM_FLUSH_SECONDS` by `recorder.stream_text` → the host's `text_writer`).",
        "call",
    ),
    (
        "realtime.events",
        "`publish_delta`: the `text-delta` event (session, message, part, offset, text), "
        "coalesced and numbered (`seq`, `prev`) by the publisher on the run host's loop, "
        "sent to the session's group.",
        "the channel layer (Redis pub/sub): every web process with a socket of the session",
    ),
    (
        "sessions_app.consumers",
        "`SessionConsumer.session_event`: the frame, encoded once for every listener, "
        "written to the browser's socket — the first `text-delta` of the run.",
        "",
    ),
)


def walk_problems() -> list[str]:
    """Where the walk is not the code's: a module that does not exist, a call whose caller
    does not import the callee, or a step that the next one reaches back."""
    graph = grimp.build_graph(*PACKAGES)
    problems = []
    for (module, _, how), (after, _, _) in zip(WALK, WALK[1:], strict=False):
        missing = [name for name in (module, after) if name not in graph.modules]
        if missing:
            problems += [f"{name}: no such module" for name in missing]
            continue
        if how == "call":
            if after not in graph.find_modules_directly_imported_by(module):
                problems.append(f"{module} calls {after} without importing it")
            if graph.chain_exists(importer=after, imported=module):
                problems.append(f"{after} reaches {module} back: a climb")
        elif graph.chain_exists(importer=module, imported=after):
            # A hand-off starts the next process's part at its entry point (the task, the
            # socket's consumer), which may import the sender's names; never the reverse.
            problems.append(f"{module} hands the run to {after} by {how}, yet imports it")
    return problems


def walk() -> str:
    lines = [
        WALK_BEGIN,
        "",
        "## The walk: a run's id from `POST …/runs/` to the first `text-delta`",
        "",
        "Module by module, down the floors: each step calls the next through an import (the",
        "callee never imports its caller back), or hands the id on without one (a queue, the",
        "broker, the channel layer), and the next process's part starts again at its entry",
        "point (the Celery task, the socket's consumer). Services mode; in embedded mode step",
        "5 puts the id on the runtime's local queue, which the host's intake thread of the",
        "same process takes. `scripts/architecture.py` checks each step against the imports.",
        "",
    ]
    for i, (module, what, how) in enumerate(WALK, start=1):
        lines.append(f"{i}. **`{module}`** — {what}")
        if how and how != "call":
            lines.append(f"   *Handed on through {how}.*")
    lines += ["", WALK_END]
    return "\n".join(lines)


def current(text: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    text = head + diagram() + tail
    if WALK_BEGIN not in text:  # the walk goes at the end the first time
        return text.rstrip("\n") + "\n\n" + walk() + "\n"
    head, _, rest = text.partition(WALK_BEGIN)
    _, _, tail = rest.partition(WALK_END)
    return head + walk() + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the doc is not current")
    args = parser.parse_args(argv)
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        print(f"{DOC}: the diagram's markers are missing", file=sys.stderr)
        return 1
    fresh = current(text)
    problems = walk_problems()
    for problem in problems:
        print(f"the walk: {problem}", file=sys.stderr)
    if args.check:
        if problems:
            return 1
        if fresh != text:
            print(f"{DOC} is not current: run python -m scripts.architecture", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
