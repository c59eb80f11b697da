"""Session export (docs/semantics.md §17.1): the whole session as one JSON document that
``importing.import_session`` reads back, or its active path as readable Markdown.

The JSON document (``format`` "agentplat-session", ``version`` 1) holds:

* ``session``: its title, model, system prompt, checkpoint mode, own tool rules, head, a
  pending revert, usage and lineage (``forked_from_*``);
* ``messages``: every message of every branch (hidden ones too), oldest first, each with its
  parts whole (the stored columns: ``text``, ``call_id``, ``tool``, ``state``, ``data``);
* ``runs``: every run, with its lineage (``forked_from_*``, ``interrupted_run_id``,
  ``replaced_by``, ``branch``);
* ``files``: the worktree's regular files now, text as text and anything else (bytes that are
  not UTF-8, or text with NUL) as base64; links and special files are left out and listed in
  ``skipped``;
* ``objects``: the git objects (trees and blobs, base64) of every snapshot the parts and the
  session name — what revert, diff and continue read — except the blobs ``files`` already
  holds (``missing_objects``: those the store had lost). An import writes them into its
  store, so those moves work on the imported session even in another deployment; a git
  object's id is the hash of its content, so the parts' snapshot ids stay valid as they are.

Rows are read in one transaction (repeatable read on PostgreSQL), so a run that writes
meanwhile never leaves a part whose message or a message whose run is missing; the files
are read after it, outside any transaction. The file content (``files`` and ``objects``) is
bounded by ``EXPORT_MAX_BYTES``, checked on the sizes before anything is read.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core.errors import AppError, NotFoundError
from core.mode import holds_worktrees
from sessions_app.models import Message, Part, Session
from sessions_app.reads import snapshots_for_read
from sessions_app.selectors import _iso, active_path, current_tree
from workspace import snapshots, store, tree_reads
from workspace.git_names import git_refuses

from ..models import Run

FORMAT = "agentplat-session"
VERSION = 1
TEXT, BASE64 = "utf-8", "base64"


class ExportTooLarge(AppError):
    status_code = 413
    type = "TooLarge"


# -- the JSON document ------------------------------------------------------------------------
def session_document(*, session: Session) -> dict[str, Any]:
    """The whole session (see the module's docstring). ExportTooLarge past
    ``EXPORT_MAX_BYTES`` of file content."""
    with _one_view_of_the_database():
        session = Session.objects.filter(id=session.id).first()
        if session is None:
            raise NotFoundError("No such session.")
        messages = list(Message.objects.filter(session=session).order_by("id"))
        parts = list(Part.objects.filter(session_id=session.id).order_by("message_id", "order"))
        runs = list(Run.objects.filter(session=session).order_by("id"))
    by_message: dict[str, list[Part]] = {}
    for part in parts:
        by_message.setdefault(part.message_id, []).append(part)
    budget = settings.EXPORT_MAX_BYTES
    roots = snapshot_names(session, parts, runs)
    snap, (files, skipped, used) = _files_now(session, roots, budget)
    blobs = {blob_id(f.content) for f in files}
    objects, missing = history_objects(snap, roots, blobs, budget - used)
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": _iso(timezone.now()),
        "session": _session(session),
        "messages": [_message(m, by_message.get(m.id, [])) for m in messages],
        "runs": [_run(r) for r in runs],
        "files": [_file(f) for f in files],
        "skipped": skipped,
        "objects": [
            {"id": sha, "type": kind, "data": base64.b64encode(body).decode("ascii")}
            for sha, (kind, body) in objects.items()
        ],
        "missing_objects": missing,
    }


@contextlib.contextmanager
def _one_view_of_the_database() -> Iterator[None]:
    """The reads inside see one state of the database: PostgreSQL's repeatable read (set
    first in a transaction of our own; inside a caller's transaction its view is kept);
    SQLite's transactions read one state already."""
    own = not connection.in_atomic_block
    with transaction.atomic():
        if own and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield


def _session(session: Session) -> dict[str, Any]:
    return {
        "id": session.id,
        "title": session.title,
        "model": session.model,
        "system_prompt": session.system_prompt,
        "checkpoint": session.checkpoint,
        "permissions": session.permissions or {},
        "head_message_id": session.head_id,
        "revert": session.revert,
        "summary": session.summary or {},
        "usage": session.usage or {},
        "context_tokens": session.context_tokens,
        "forked_from_session_id": session.forked_from_session_id,
        "forked_from_message_id": session.forked_from_message_id,
        "created_at": _iso(session.created_at),
        "updated_at": _iso(session.updated_at),
    }


def _message(message: Message, parts: list[Part]) -> dict[str, Any]:
    return {
        "id": message.id,
        "parent_id": message.parent_id,
        "role": message.role,
        "run_id": message.run_id,
        "created_at": _iso(message.created_at),
        "completed_at": _iso(message.completed_at),
        "error": message.error,
        "model": message.model,
        "tokens": message.tokens or {},
        "structured": message.structured,
        "hidden": message.hidden,
        "parts": [
            {
                "id": p.id,
                "order": p.order,
                "type": p.type,
                "text": p.text,
                "call_id": p.call_id,
                "tool": p.tool,
                "state": p.state,
                "data": p.data or {},
            }
            for p in parts
        ],
    }


RUN_FIELDS = (
    "id",
    "mode",
    "status",
    "result",
    "input",
    "input_message_id",
    "output_schema",
    "output",
    "error",
    "model",
    "checkpoint",
    "multitask_strategy",
    "max_steps",
    "abort_requested",
    "interrupted_run_id",
    "forked_from_run_id",
    "forked_from_message_index",
    "forked_from_session_id",
    "branch",
    "replaced_by",
    "usage",
    "attempts",
)
RUN_TIMES = ("created_at", "started_at", "finished_at")


def _run(run: Run) -> dict[str, Any]:
    data = {name: getattr(run, name) for name in RUN_FIELDS}
    data.update({name: _iso(getattr(run, name)) for name in RUN_TIMES})
    return data


def _file(file: WorktreeFile) -> dict[str, Any]:
    try:
        text = file.content.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    entry: dict[str, Any] = {"path": file.path}
    if text is not None and "\0" not in text:  # a NUL is refused in JSON bodies: base64
        entry.update(encoding=TEXT, content=text)
    else:
        entry.update(encoding=BASE64, content=base64.b64encode(file.content).decode("ascii"))
    if file.executable:
        entry["executable"] = True
    return entry


def blob_id(content: bytes) -> str:
    """The git id of a blob holding ``content``."""
    return git_object_id("blob", content)


def git_object_id(kind: str, body: bytes) -> str:
    return hashlib.sha1(b"%s %d\0" % (kind.encode(), len(body)) + body).hexdigest()


# -- the files ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorktreeFile:
    path: str  # relative, "/"-separated
    content: bytes
    executable: bool


def worktree_files(root: Path, budget: int) -> tuple[list[WorktreeFile], list[dict[str, str]], int]:
    """The worktree's regular files in path order, what was
    left out (``[{path, reason}]``: a link, a special file, a name git or JSON cannot hold)
    and the bytes read. ``.git`` directories are the snapshots' business, not the session's:
    left out silently, as snapshots leave them out. ExportTooLarge past ``budget``, judged on
    the sizes before any file is read."""
    found: list[tuple[str, Path, bool]] = []
    skipped: list[dict[str, str]] = []
    total = 0
    stack = [root] if root.is_dir() else []
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.name == ".git":
                    continue
                rel = Path(entry.path).relative_to(root).as_posix()
                reason = _unexportable_name(rel)
                if entry.is_dir(follow_symlinks=False):
                    if reason:
                        skipped.append({"path": rel + "/", "reason": reason})
                    else:
                        stack.append(Path(entry.path))
                    continue
                if entry.is_symlink():
                    reason = "symlink"
                elif not entry.is_file(follow_symlinks=False):
                    reason = "special"
                if reason:
                    skipped.append({"path": rel, "reason": reason})
                    continue
                info = entry.stat(follow_symlinks=False)
                total += info.st_size
                found.append((rel, Path(entry.path), bool(info.st_mode & 0o100)))
    _check_budget(total, budget)
    files: list[WorktreeFile] = []
    used = 0
    for rel, path, executable in sorted(found):
        content = _read_inside(root, path, budget - used + 1)
        if content is None:
            continue
        used += len(content)
        _check_budget(used, budget)
        files.append(WorktreeFile(rel, content, executable))
    skipped.sort(key=lambda s: s["path"])
    return files, skipped, used


def _files_now(
    session: Session, roots: set[str], budget: int
) -> tuple[snapshots.Snapshots, tuple[list[WorktreeFile], list[dict[str, str]], int]]:
    """The store the history is read from, and the session's files now: the worktree's, or
    in a process that holds no worktree, the last snapshot the central store received
    (``selectors.current_tree``, through the mirror: a file the snapshots do not keep is
    then not in the export)."""
    if holds_worktrees():
        return snapshots.for_session(session), worktree_files(session.worktree, budget)
    now = current_tree(session)
    snapshots_for_read(session, now)  # the files now must be there (a 404 if the store lacks them)
    snap = snapshots_for_read(session, *roots, strict=False)  # the history: what there is
    return snap, tree_files(snap, now, budget)


def tree_files(
    snap: snapshots.Snapshots, tree: str, budget: int
) -> tuple[list[WorktreeFile], list[dict[str, str]], int]:
    """What ``worktree_files`` gives, read from the snapshot ``tree``: its files by path, its
    links and unnamable names left out and listed, the bytes read."""
    found: list[tuple[str, str, bool]] = []
    skipped: list[dict[str, str]] = []
    total = 0
    for path, mode, sha, size in tree_reads.blobs(snap, tree):
        reason = "symlink" if stat.S_ISLNK(mode) else _unexportable_name(path)
        if reason:
            skipped.append({"path": path, "reason": reason})
            continue
        total += size
        found.append((path, sha, bool(mode & 0o100)))
    _check_budget(total, budget)
    bodies = store.read_objects(snap, [sha for _path, sha, _x in found])
    files = [WorktreeFile(path, bodies[sha][1], executable) for path, sha, executable in found]
    return files, skipped, total


def _read_inside(root: Path, path: Path, limit: int) -> bytes | None:
    """At most ``limit`` bytes of the regular file at ``path``, if it is still one and still
    inside ``root`` once opened; None otherwise. A busy session's shell may swap a file or a
    directory on the way for a link (to a file of the server's) between the listing and the
    read: the link at the end is not followed, and the file opened is judged by where its
    descriptor really leads, not by the path asked for."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # gone since the listing, or a link now (ELOOP)
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # no /proc (not Linux): the path's own resolution, the best there is
            opened = Path(os.path.realpath(path))
        if root.resolve() not in opened.parents:
            return None
        return fh.read(limit)


def _unexportable_name(rel: str) -> str | None:
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8, kept by the filesystem's decoding
        return "name"
    return "name" if git_refuses(rel) else None


def _check_budget(total: int, budget: int) -> None:
    if total > budget:
        raise ExportTooLarge(
            f"The session's files take more than {settings.EXPORT_MAX_BYTES:,} bytes, the most"
            " an export holds (EXPORT_MAX_BYTES)."
        )


# -- the snapshots' history ---------------------------------------------------------------------
TREE_ID = re.compile(r"[0-9a-f]{40}")


def snapshot_names(session: Session, parts: list[Part], runs: list[Run]) -> set[str]:
    """Every tree id the exported rows name: parts' ``snapshot`` (step-start, step-finish,
    patch), a pending revert's pre-revert tree, a run's branch's files."""
    names = {(p.data or {}).get("snapshot") for p in parts}
    names.add((session.revert or {}).get("snapshot"))
    names |= {(r.branch or {}).get("files") for r in runs}
    return {n for n in names if isinstance(n, str) and TREE_ID.fullmatch(n)}


def history_objects(
    snap: snapshots.Snapshots, roots: set[str], known_blobs: set[str], budget: int
) -> tuple[dict[str, tuple[str, bytes]], list[str]]:
    """``{id: (type, body)}`` of every object reachable from the trees ``roots``, but the
    blobs of ``known_blobs``; and the ids of the roots and objects the store has lost (the
    source session cannot read them either; the import then accepts rows and trees that
    name them). ExportTooLarge when the bodies take more than ``budget`` bytes, judged on
    their sizes before any is read."""
    roots = roots - {snapshots.EMPTY_TREE}
    if not roots:
        return {}, []
    present = [sha for sha, kind, _size in store.object_info(snap, sorted(roots)) if kind == "tree"]
    reachable, missing = store.objects_named(snap, present)
    missing |= roots - set(present)
    wanted = [
        (sha, kind, size)
        for sha, kind, size in store.object_info(snap, sorted(reachable))
        if kind in ("tree", "blob") and not (kind == "blob" and sha in known_blobs)
    ]
    _check_budget(sum(size for _sha, _kind, size in wanted), budget)
    return store.read_objects(snap, [sha for sha, _kind, _size in wanted]), sorted(missing)


# -- Markdown -----------------------------------------------------------------------------------
def session_markdown(*, session: Session) -> str:
    """The active path as Markdown: a section per message, text as it is, reasoning quoted,
    tool calls as fenced blocks (input, then output or error)."""
    out = [f"# {_one_line(session.title) or session.id}", ""]
    out += [f"*Session `{session.id}`, model `{session.model}`, exported {_iso(timezone.now())}*"]
    if session.system_prompt:
        out += ["", "## System prompt", "", *_fenced(session.system_prompt, "text")]
    for message in active_path(session):
        out += ["", "## User" if message.role == Message.Role.USER else "## Assistant"]
        for part in message.loaded_parts:
            block = _markdown_part(part)
            if block:
                out += ["", *block]
        error = message.error if isinstance(message.error, dict) else None
        if error:
            out += ["", f"> **Error:** {_one_line(str(error.get('message') or error))}"]
    return "\n".join(out).rstrip() + "\n"


def _markdown_part(part: Part) -> list[str]:
    if part.type == Part.Type.TEXT:
        return part.text.rstrip("\n").split("\n") if part.text.strip() else []
    if part.type == Part.Type.REASONING:
        return _quoted(part.text) if part.text.strip() else []
    if part.type == Part.Type.COMPACTION:
        return _quoted("**Summary of the earlier conversation:**\n" + part.text)
    if part.type == Part.Type.PATCH:
        files = (part.data or {}).get("files") or []
        names = ", ".join(f"`{name}`" for name in files if isinstance(name, str))
        return [f"*Files changed: {names}*"] if names else []
    if part.type == Part.Type.TOOL:
        return _markdown_tool(part)
    return []


def _markdown_tool(part: Part) -> list[str]:
    state = part.state if isinstance(part.state, dict) else {}
    status = state.get("status") or "pending"
    lines = [f"**Tool `{_one_line(part.tool)}`** ({status})", ""]
    lines += _fenced(json.dumps(state.get("input") or {}, indent=2, ensure_ascii=False), "json")
    if state.get("output") not in (None, ""):
        output = state["output"]
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        lines += ["", "Output:", "", *_fenced(text, "text")]
    if state.get("error"):
        lines += ["", "Error:", "", *_fenced(str(state["error"]), "text")]
    return lines


def _fenced(text: str, language: str) -> list[str]:
    """A fenced code block that ``text`` cannot close: its fence is longer than any run of
    backticks inside."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{language}", *text.rstrip("\n").split("\n"), fence]


def _quoted(text: str) -> list[str]:
    return [f"> {line}".rstrip() for line in text.rstrip("\n").split("\n")]


def _one_line(text: str) -> str:
    return " ".join(text.split())
