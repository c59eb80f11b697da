"""Blame (docs/semantics.md §14.4): for each run of a file's lines at a point of a session, the tool
call whose step last changed it.

Read from the snapshots, never guessed: the steps of the path to the point whose ``patch``
part names the file become a chain of commits in the session's snapshot store, one per step,
whose tree is the step's ``step-finish`` tree. The chain's root is the path's first snapshot
(the first ``step-start``: a clone's or an upload's files, or nothing yet), so its lines are
"before the session" (null ids). ``git blame`` of the chain's tip then says which commit, so
which step, last changed each line — exactly what ``git blame`` says of a repository with one
commit per step. A tree between two steps that no step made (a history move that put files
back) gets a commit of its own, also with null ids.

Within a step, the line goes to the last tool call of the step whose input names the file;
a step whose tools do not name it (a shell command) gives it to its first tool; a step with
no tool (an applied change) to its first part that is neither text nor a step marker.

The commits name the snapshot trees as they are (nothing to write but the commits), their
times are fixed (as in ``downloads._commit``), so a repeated blame writes no new object; the
blame does not follow renames (``--no-follow``: a file a step adds is that step's). Bounds:
the file at most ``SNAPSHOT_MAX_FILE_BYTES`` and text (a NUL in its first 8,000 bytes, git's
test, makes it binary: 400); the last ``BLAME_STEPS_MAX`` steps that changed it are followed,
lines older than those count as before (null ids).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.conf import settings

from core.errors import InvalidInput, NotFoundError
from workspace import snapshots, tree_objects, tree_reads

from ..models import Message, Part, Session
from ..reads import snapshots_for_read
from ..selectors import fork_point, path_ids

BLAME_STEPS_MAX = 1000  # steps that changed the file, followed back from the point
BINARY_PROBE = 8000  # bytes git reads to call a file binary
PATH_MAX = 4096
CHAIN_TIME = 1_000_000_000  # commit times: fixed, so the same chain is the same objects
IDENT = "agentplat blame <blame@agentplat.invalid>"
MARKERS = (Part.Type.STEP_START, Part.Type.STEP_FINISH, Part.Type.PATCH)
NOT_A_SOURCE = (Part.Type.TEXT, Part.Type.REASONING, Part.Type.COMPACTION, Part.Type.FILE)


@dataclass(frozen=True)
class Origin:
    """The tool call (or part) a step's change to the file is put on."""

    message_id: str
    part_id: str | None
    run_id: str | None
    tool: str | None
    step: int | None
    position: int  # the message's place in the path, from 1
    turn: int  # the turn it belongs to: how many user messages the path has up to it
    created_at: str | None

    def data(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "part_id": self.part_id,
            "run_id": self.run_id,
            "tool": self.tool,
            "step": self.step,
            "position": self.position,
            "turn": self.turn,
            "created_at": self.created_at,
        }


BEFORE = {
    "message_id": None,
    "part_id": None,
    "run_id": None,
    "tool": None,
    "step": None,
    "position": None,
    "turn": None,
    "created_at": None,
}


@dataclass(frozen=True)
class Change:
    before: str  # the step's tree before it ran
    after: str  # and after
    origin: Origin


@dataclass
class History:
    root: str | None  # the path's first snapshot
    changes: list[Change]  # the steps that changed the file, oldest first
    final: str | None  # the last snapshot of the path: the files at the point


def blame_file(*, session: Session, path: str, message_id: str | None = None) -> list[dict]:
    """``[{start, end, message_id, part_id, run_id, tool, step, position, created_at}]``
    for the file ``path`` at the point after ``message_id`` (any branch; default: the head,
    before a pending revert's boundary): each run of lines (1-based, ``end`` included) with
    the tool call that last changed it, or null ids for lines from before the path's first
    snapshot."""
    name = _clean(path)
    leaf = fork_point(session, message_id or None)  # NotFoundError for another session's id
    history = _history(session, path_ids(leaf, session.id) if leaf else [], name)
    if history.final is None:
        raise NotFoundError("No such file at that point.")
    trees = [
        history.root,
        history.final,
        *(t for c in history.changes for t in (c.before, c.after)),
    ]
    snap = snapshots_for_read(session, *trees)
    try:
        return _blame(snap, history, name)
    except snapshots.MissingObjectError as exc:
        raise NotFoundError("The snapshots of that point are not in the store.") from exc


def _clean(path: str) -> str:
    if not path or len(path) > PATH_MAX or "\0" in path or "\n" in path:
        raise InvalidInput("path must name a file of the worktree.")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise InvalidInput("path must name a file of the worktree (no empty, . or .. parts).")
    return path


def _when(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def _names(tool_path: Any, name: str) -> bool:
    if not isinstance(tool_path, str) or not tool_path.strip():
        return False
    return posixpath.normpath(tool_path.strip()).removeprefix("./") == name


def _history(session: Session, ids: list[str], name: str) -> History:
    """The path's first and last snapshots and the steps that changed ``name``. Reads no
    tool's input (a ``write``'s is the whole file): only where a step that changed the file
    made several calls, their input paths, extracted by the database."""
    if not ids:
        return History(None, [], None)
    rows = Message.objects.filter(id__in=ids).values_list("id", "run_id", "created_at", "role")
    messages = {mid: (run, at) for mid, run, at, _ in rows}
    roles = {mid: role for mid, _, _, role in rows}
    root, final, steps = _steps_changing(name, ids, _parts_by_message(ids))
    if len(steps) > BLAME_STEPS_MAX:
        steps = steps[-BLAME_STEPS_MAX:]
        root = steps[0].before
    paths = _input_paths(steps)
    position = {mid: i for i, mid in enumerate(ids, start=1)}
    turns = _turns(ids, roles)
    changes = []
    for step in steps:
        part, tool = _chosen(step.tools, step.others, paths, name)
        run_id, created = messages.get(step.message_id, (None, None))
        at = position[step.message_id]
        origin = Origin(
            step.message_id, part, run_id, tool, step.number, at, turns[step.message_id],
            _when(created),
        )  # fmt: skip
        changes.append(Change(step.before, step.after, origin))
    return History(root, changes, final or root)


def _turns(ids: list[str], roles: dict[str, str]) -> dict[str, int]:
    """Each message of the path: its turn's number as the chat counts turns (the user
    messages up to it, from 1; 0 before the first)."""
    turns, count = {}, 0
    for mid in ids:
        count += roles.get(mid) == Message.Role.USER
        turns[mid] = count
    return turns


class _Step(NamedTuple):
    """A step that changed the file, as its message's parts tell it."""

    message_id: str
    before: str  # the tree before the step (its patch part's)
    after: str  # and after (its step-finish's)
    tools: list[tuple[str, str]]  # (part id, tool) of the step's calls
    others: list[tuple[str, str]]  # (part id, kind) of the message's parts of other kinds
    number: int | None  # the step's number in its run


def _parts_by_message(ids: list[str]) -> dict[str, list[tuple]]:
    """The path's parts that may carry a change (text and the like aside), in order, by
    message: ``(id, message_id, type, tool, data)``."""
    rows = (
        Part.objects.filter(message_id__in=ids)
        .exclude(type__in=NOT_A_SOURCE)
        .order_by("message_id", "order")
        .values_list("id", "message_id", "type", "tool", "data")
    )
    by_message: dict[str, list[tuple]] = {}
    for row in rows:
        by_message.setdefault(row[1], []).append(row)
    return by_message


def _steps_changing(
    name: str, ids: list[str], by_message: dict[str, list[tuple]]
) -> tuple[str | None, str | None, list[_Step]]:
    """Along the path: its first snapshot, its last, and the steps whose patch names
    ``name`` (a clone's or an upload's seeding step aside: its files are the first
    snapshot, not a change)."""
    root = final = None
    steps: list[_Step] = []
    for mid in ids:
        tools: list[tuple[str, str]] = []
        others: list[tuple[str, str]] = []  # the message's, wherever they are in it
        step, after, seeded = None, None, False
        for part_id, _mid, kind, tool, data in by_message.get(mid, []):
            data = data or {}
            if kind == Part.Type.STEP_START:
                root = root or data.get("snapshot")
                tools, step, after = [], data.get("step"), None
                # A clone's or an upload's files: the first snapshot itself, not a change.
                seeded = bool(data.get("source"))
            elif kind == Part.Type.STEP_FINISH:
                after = data.get("snapshot") or after
                final = after or final
            elif kind == Part.Type.PATCH:
                if seeded or not (after and data.get("snapshot")):
                    continue
                if name in (data.get("files") or ()):
                    steps.append(_Step(mid, data["snapshot"], after, tools, others, step))
            elif kind == Part.Type.TOOL:
                tools.append((part_id, tool))
            else:
                others.append((part_id, kind))  # an applied change's part, or a kind to come
    return root, final, steps


def _input_paths(steps: list[_Step]) -> dict[str, Any]:
    """Call id → its input's ``path``, for the calls of the steps that made several (the
    only input read, and by the database: a ``write``'s is the whole file)."""
    several = [part for s in steps if len(s.tools) > 1 for part, _tool in s.tools]
    return dict(
        Part.objects.filter(id__in=several).values_list("id", "state__input__path")
        if several
        else ()
    )


def _chosen(
    tools: list[tuple[str, str]],
    others: list[tuple[str, str]],
    paths: dict[str, Any],
    name: str,
) -> tuple[str | None, str | None]:
    """(part id, tool name) a step's change to ``name`` is put on: its last call whose
    input names the file, else its first call, else its message's first part of another
    kind (named by its kind)."""
    for part_id, tool in reversed(tools):
        if _names(paths.get(part_id), name):
            return part_id, tool
    if tools:
        return tools[0]
    return others[0] if others else (None, None)  # an applied change: ("prt_…", "applied")


def _blame(snap: snapshots.Snapshots, history: History, name: str) -> list[dict]:
    body = snap.read_blob(history.final, name)
    if body is None:  # not there, or a directory
        raise NotFoundError("No such file at that point.")
    _check_text(body, name)
    # The chain: the first snapshot, then per step its tree after (a tree between two steps
    # that no step made first), then the point's if it differs from the last.
    trees: list[tuple[str, Origin | None]] = [(history.root or snapshots.EMPTY_TREE, None)]
    for change in history.changes:
        if change.before != trees[-1][0]:
            trees.append((change.before, None))
        trees.append((change.after, change.origin))
    if history.final != trees[-1][0]:
        trees.append((history.final, None))
    tree_objects.write_object(
        snap, "tree", b""
    )  # the root's when nothing came before: git reads it too
    origins: dict[str, Origin | None] = {}
    parent = None
    for index, (tree, origin) in enumerate(trees):
        parent = _commit(snap, tree, parent, origin, index)
        origins[parent] = origin
    return _runs(
        (start, end, origins.get(commit))
        for start, end, commit in tree_reads.blame(snap, parent, name)
    )


def _check_text(body: bytes, name: str) -> None:
    limit = settings.SNAPSHOT_MAX_FILE_BYTES
    if limit and len(body) > limit:
        raise InvalidInput(
            f"{name} is larger than {limit:,} bytes (SNAPSHOT_MAX_FILE_BYTES): no blame."
        )
    if b"\0" in body[:BINARY_PROBE]:
        raise InvalidInput(f"{name} is a binary file: blame shows text files only.")


def _commit(
    snap: snapshots.Snapshots, tree: str, parent: str | None, origin: Origin | None, index: int
) -> str:
    label = f"{origin.message_id} {origin.part_id or '-'}" if origin else "before"
    stamp = f"{CHAIN_TIME + index} +0000"
    lines = [f"tree {tree}", *([f"parent {parent}"] if parent else [])]
    lines += [f"author {IDENT} {stamp}", f"committer {IDENT} {stamp}", "", label]
    return tree_objects.write_object(snap, "commit", ("\n".join(lines) + "\n").encode())


def _runs(groups: Iterable[tuple[int, int, Origin | None]]) -> list[dict]:
    """Adjacent groups of the same origin as one run."""
    runs: list[dict] = []
    last: Origin | None = None
    for start, end, origin in groups:
        if runs and origin == last and runs[-1]["end"] == start - 1:
            runs[-1]["end"] = end
            continue
        runs.append({"start": start, "end": end, **(origin.data() if origin else BEFORE)})
        last = origin
    return runs
