"""The import's door: a session export (``export.session_document``'s format) checked whole,
before anything is written, into an ``ImportPlan`` that ``importing`` only has to store.

Every refusal is an ``InvalidInput`` (400) whose sentence names the place
(``messages[3].parts[0].type must be one of …``). What is checked:

* the format and its version, and every object's fields: the required ones there, no unknown
  one, each of its type and within its column's bounds (a string longer than its column, a
  number past an integer column, a date that is not one would fail in the database instead);
* the counts (``IMPORT_MAX_*``) before anything else is read, and the bytes of file content
  (``EXPORT_MAX_BYTES``; the files also within ``WORKTREE_MAX_FILE_BYTES`` and
  ``WORKTREE_MAX_BYTES``);
* the links: ids unique, every parent, run, input message, head and revert boundary inside
  the document, no cycle among parents;
* the files: plain relative paths (no ``..``, no absolute path, no ``.git``, nothing git
  refuses), none twice, none both a file and a directory;
* the snapshot objects: each one's id is the hash of its content; trees well formed, sorted,
  with names git accepts, every entry present (in ``objects`` or as a file's blob) and of
  its kind; links (mode 120000) only to relative targets without ``..``, so none can lead
  out of the worktree whatever directory it sits in; every tree id a row names is one.

The values that reach git (tree ids, a patch's file names) are the ones checked hardest: an
id that is not 40 hex digits could be read by git as an option. The files and objects are
checked in ``import_files``; the field checks both use are ``import_fields``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from core.errors import InvalidInput
from sessions_app.models import Message, Part, Session
from workspace import snapshots

from ..lifecycle import STRATEGIES
from ..models import Run
from .export import FORMAT, VERSION
from .import_fields import (
    ID,
    INT_MAX,
    REF,
    REQUIRED,
    anything,
    array,
    bounded,
    choice,
    fields,
    flag,
    moment,
    obj,
    obj_or_null,
    objects_list,
    quoted,
    relative_paths,
    rules,
    text,
    tree_id,
    tree_ids,
    whole,
)
from .import_files import ImportFile, ImportObject, check_files, check_objects

MAX_STEPS = 10_000
TOOL_STATUSES = ("pending", "running", "completed", "error")


@dataclass
class ImportPlan:
    session: dict[str, Any]
    messages: list[dict[str, Any]]  # oldest id first, each with its checked "parts"
    runs: list[dict[str, Any]]  # oldest id first
    files: list[ImportFile]
    objects: list[ImportObject]  # the snapshot objects, and the file blobs trees name
    source: dict[str, Any] = field(default_factory=dict)  # what the history event records
    missing: set[str] = field(default_factory=set)  # ids named, not carried (``missing_objects``)


SESSION = {
    "id": (ID, REQUIRED),
    "title": (text(200), REQUIRED),
    "model": (text(200), REQUIRED),
    "system_prompt": (text(100_000), REQUIRED),
    "checkpoint": (choice(Session.Checkpoint.values), REQUIRED),
    "permissions": (rules, REQUIRED),
    "head_message_id": (REF, REQUIRED),
    "revert": (obj_or_null, None),
    "summary": (obj, dict),
    "usage": (obj, dict),
    "context_tokens": (whole(), 0),
    "forked_from_session_id": (REF, None),
    "forked_from_message_id": (REF, None),
    "created_at": (moment(null=True), None),
    "updated_at": (moment(null=True), None),
}
REVERT = {
    "message_id": (ID, REQUIRED),
    "part_id": (REF, None),
    "snapshot": (tree_id(), REQUIRED),
    "diff": (text(), ""),
    "files": (relative_paths, list),
    "changes": (objects_list, list),
    # What the revert left alone (files no snapshot holds) and its mode (docs/semantics.md §14.5).
    "not_kept": (obj_or_null, None),
    "mode": (choice(["both", "conversation", "files"]), "both"),
}
PART = {
    "id": (ID, REQUIRED),
    "order": (whole(), REQUIRED),
    "type": (choice(Part.Type.values), REQUIRED),
    "text": (text(), ""),
    "call_id": (text(100), ""),
    "tool": (text(100), ""),
    "state": (obj_or_null, None),
    "data": (obj, dict),
}
MESSAGE = {
    "id": (ID, REQUIRED),
    "parent_id": (REF, REQUIRED),
    "role": (choice(Message.Role.values), REQUIRED),
    "run_id": (REF, None),
    "created_at": (moment(), REQUIRED),
    "completed_at": (moment(null=True), None),
    "error": (obj_or_null, None),
    "model": (text(200), ""),
    "tokens": (obj, dict),
    "structured": (anything, None),
    "hidden": (flag, False),
    "parts": (array, REQUIRED),
}
RUN = {
    "id": (ID, REQUIRED),
    "mode": (choice(Run.Mode.values), REQUIRED),
    "status": (choice(Run.Status.values), REQUIRED),
    "result": (text(16, null=True), None),
    "input": (objects_list, list),
    "input_message_id": (REF, None),
    "output_schema": (anything, None),
    "output": (anything, None),
    "error": (anything, None),
    "model": (text(200), ""),
    "checkpoint": (choice(Session.Checkpoint.values), Session.Checkpoint.TOOL_BATCH.value),
    "multitask_strategy": (choice(STRATEGIES), "reject"),
    "max_steps": (whole(0, MAX_STEPS), 25),
    "abort_requested": (flag, False),
    "interrupted_run_id": (REF, None),
    "forked_from_run_id": (REF, None),
    "forked_from_message_index": (whole(-INT_MAX, INT_MAX, null=True), None),
    "forked_from_session_id": (REF, None),
    "branch": (obj_or_null, None),
    "replaced_by": (REF, None),
    "usage": (obj, dict),
    "attempts": (whole(), 0),
    "created_at": (moment(null=True), None),
    "started_at": (moment(null=True), None),
    "finished_at": (moment(null=True), None),
}


# -- the document ---------------------------------------------------------------------------------
def check_import(document: Any) -> ImportPlan:
    """The whole document checked (see the module's docstring), as a plan to store."""
    top = _check_format(document)
    _check_part_count(top["messages"])
    session = fields(top["session"], "session", SESSION)
    runs = [fields(r, f"runs[{i}]", RUN) for i, r in enumerate(top["runs"])]
    messages = [_message(m, f"messages[{i}]") for i, m in enumerate(top["messages"])]
    _check_links(session, messages, runs)
    files = check_files(top["files"])
    missing = set(top["missing_objects"])
    objects = check_objects(top["objects"], files, missing)
    _check_tree_names(session, messages, runs, objects, missing)
    return ImportPlan(
        session=session,
        messages=sorted(messages, key=lambda m: m["id"]),
        runs=sorted(runs, key=lambda r: r["id"]),
        files=files,
        objects=objects,
        source={
            "source_session_id": session["id"],
            "forked_from_session_id": session["forked_from_session_id"],
            "forked_from_message_id": session["forked_from_message_id"],
            "exported_at": top["exported_at"],
        },
        missing=missing,
    )


def _check_format(document: Any) -> dict[str, Any]:
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise InvalidInput(
            "This is not a session export: an import takes the JSON of an export (format"
            f" {FORMAT!r})."
        )
    if "version" not in document:
        raise InvalidInput("version is missing.")
    version = document["version"]
    if version != VERSION or isinstance(version, bool):
        raise InvalidInput(
            f"This export's version is {quoted(version)}; this deployment reads version {VERSION}."
        )
    limit = settings.IMPORT_MAX_MESSAGES
    return fields(
        document,
        "",
        {
            "format": (anything, REQUIRED),
            "version": (anything, REQUIRED),
            "exported_at": (text(64, null=True), None),
            "session": (obj, REQUIRED),
            "messages": (bounded(array, limit, "IMPORT_MAX_MESSAGES"), REQUIRED),
            "runs": (bounded(array, limit, "IMPORT_MAX_MESSAGES"), REQUIRED),
            "files": (bounded(array, settings.IMPORT_MAX_FILES, "IMPORT_MAX_FILES"), REQUIRED),
            "objects": (
                bounded(array, settings.IMPORT_MAX_OBJECTS, "IMPORT_MAX_OBJECTS"),
                REQUIRED,
            ),
            "skipped": (objects_list, list),
            "missing_objects": (tree_ids, list),
        },
    )


def _check_part_count(messages: list[Any]) -> None:
    """Counted before any part is read (a message that is not an object counts none here,
    and is refused when it is read)."""
    parts = (m.get("parts") for m in messages if isinstance(m, dict))
    total = sum(len(p) for p in parts if isinstance(p, list))
    if total > settings.IMPORT_MAX_PARTS:
        raise InvalidInput(
            f"The export holds {total:,} parts; an import takes at most"
            f" {settings.IMPORT_MAX_PARTS:,} (IMPORT_MAX_PARTS)."
        )


def _message(value: Any, where: str) -> dict[str, Any]:
    message = fields(value, where, MESSAGE)
    message["parts"] = [_part(p, f"{where}.parts[{j}]") for j, p in enumerate(message["parts"])]
    return message


def _part(value: Any, where: str) -> dict[str, Any]:
    part = fields(value, where, PART)
    data, kind = part["data"], part["type"]
    if kind in (Part.Type.STEP_START, Part.Type.STEP_FINISH, Part.Type.PATCH):
        # Revert and diff read these trees (and hand them to git).
        tree_id()(data.get("snapshot"), f"{where}.data.snapshot")
    elif "snapshot" in data:
        tree_id(null=True)(data["snapshot"], f"{where}.data.snapshot")
    if "step" in data:
        whole(0, MAX_STEPS)(data["step"], f"{where}.data.step")
    if kind == Part.Type.PATCH:
        relative_paths(data.get("files", []), f"{where}.data.files")
    if kind == Part.Type.COMPACTION and "replaced" in data:
        whole()(data["replaced"], f"{where}.data.replaced")
    state = part["state"]
    if state is not None:
        if "status" in state:
            choice(TOOL_STATUSES)(state["status"], f"{where}.state.status")
        for key in ("input", "metadata", "approval", "time"):
            if key in state:
                obj_or_null(state[key], f"{where}.state.{key}")
    return part


def _check_links(
    session: dict[str, Any], messages: list[dict[str, Any]], runs: list[dict[str, Any]]
) -> None:
    """Ids unique; every link inside the document; no cycle among the parents."""
    run_ids = _unique([r["id"] for r in runs], "runs", "run")
    _unique([m["id"] for m in messages], "messages", "message")
    parents = {m["id"]: m for m in messages}
    part_ids = _unique([p["id"] for m in messages for p in m["parts"]], "parts", "part")

    def known(value: str | None, pool: Any, where: str, what: str) -> None:
        if value is not None and value not in pool:
            raise InvalidInput(f"{where} names {what} {quoted(value)}, which the export lacks.")

    for i, m in enumerate(messages):
        known(m["parent_id"], parents, f"messages[{i}].parent_id", "a message")
        known(m["run_id"], run_ids, f"messages[{i}].run_id", "a run")
    for i, r in enumerate(runs):
        known(r["input_message_id"], parents, f"runs[{i}].input_message_id", "a message")
        for key in ("interrupted_run_id", "forked_from_run_id", "replaced_by"):
            known(r[key], run_ids, f"runs[{i}].{key}", "a run")
        if r["branch"] is not None:
            _check_branch(r["branch"], f"runs[{i}].branch")
    known(session["head_message_id"], parents, "session.head_message_id", "a message")
    if session["revert"] is not None:
        revert = session["revert"] = fields(session["revert"], "session.revert", REVERT)
        known(revert["message_id"], parents, "session.revert.message_id", "a message")
        known(revert["part_id"], part_ids, "session.revert.part_id", "a part")
    _check_no_cycle({mid: m["parent_id"] for mid, m in parents.items()})


def _unique(ids: list[str], where: str, what: str) -> set[str]:
    seen: set[str] = set()
    for value in ids:
        if value in seen:
            raise InvalidInput(f"{where}: two of them have the {what} id {quoted(value)}.")
        seen.add(value)
    return seen


def _check_branch(branch: dict[str, Any], where: str) -> None:
    """A continue's or regenerate's record (``runs_app.services.branching``): its links may
    name messages a cleanup deleted since, so the importer maps what it can and drops the
    rest; their shapes are checked here."""
    for key in ("parent_message_id", "source_run_id", "replaces"):
        if key in branch:
            REF(branch[key], f"{where}.{key}")
    if "hide" in branch:
        for i, value in enumerate(array(branch["hide"], f"{where}.hide")):
            ID(value, f"{where}.hide[{i}]")
    if "input" in branch:
        objects_list(branch["input"], f"{where}.input")
    if "files" in branch:
        tree_id(null=True)(branch["files"], f"{where}.files")
    if "applied" in branch:
        flag(branch["applied"], f"{where}.applied")


def _check_no_cycle(parents: dict[str, str | None]) -> None:
    done: set[str] = set()
    for start in parents:
        chain: list[str] = []
        on_chain: set[str] = set()
        current: str | None = start
        while current is not None and current not in done:
            if current in on_chain:
                raise InvalidInput(
                    f"The messages' parents make a cycle (through message {quoted(current)})."
                )
            chain.append(current)
            on_chain.add(current)
            current = parents[current]
        done.update(chain)


def _check_tree_names(
    session: dict[str, Any],
    messages: list[dict[str, Any]],
    runs: list[dict[str, Any]],
    objects: list[ImportObject],
    missing: set[str],
) -> None:
    """Every tree a row names is in the export (or the empty tree), or among the trees the
    export says its store had lost (``missing_objects``): a revert of the imported session
    finds the files it needs, as it would have in the source."""
    trees = {o.id for o in objects if o.type == "tree"} | {snapshots.EMPTY_TREE} | missing
    named: list[tuple[str, str]] = []
    for i, m in enumerate(messages):
        for j, p in enumerate(m["parts"]):
            if isinstance(p["data"].get("snapshot"), str):
                named.append((p["data"]["snapshot"], f"messages[{i}].parts[{j}].data.snapshot"))
    if session["revert"]:
        named.append((session["revert"]["snapshot"], "session.revert.snapshot"))
    for i, r in enumerate(runs):
        files = (r["branch"] or {}).get("files")
        if isinstance(files, str):
            named.append((files, f"runs[{i}].branch.files"))
    for tree, where in named:
        if tree not in trees:
            raise InvalidInput(f"{where} names the tree {tree}, which the export lacks.")
