"""The files and snapshot objects of an import, checked (``import_checks`` calls these): file
paths plain, relative and each once; contents decoded and within the worktree's bounds; each
git object's content hashing to its id, each tree well formed, sorted, named as git names,
complete, and its links unable to lead out of the worktree."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from core.errors import InvalidInput
from workspace import snapshots
from workspace.git_names import refused_component
from workspace.worktree_files import NAME_MAX, PATH_MAX

from .export import BASE64, TEXT, blob_id, git_object_id
from .import_fields import REQUIRED, choice, fields, flag, quoted, relative_path, text, tree_id

TREE_MODES = {b"100644": "blob", b"100755": "blob", b"120000": "link", b"40000": "tree"}


@dataclass(frozen=True)
class ImportFile:
    path: str
    content: bytes
    executable: bool


@dataclass(frozen=True)
class ImportObject:
    id: str
    type: str  # "tree" or "blob"
    body: bytes


FILE = {
    "path": (relative_path, REQUIRED),
    "encoding": (choice((TEXT, BASE64)), REQUIRED),
    "content": (text(), REQUIRED),
    "executable": (flag, False),
}
OBJECT = {
    "id": (tree_id(), REQUIRED),  # any object's id has a tree id's shape
    "type": (choice(("tree", "blob")), REQUIRED),
    "data": (text(), REQUIRED),
}


def check_files(items: list[Any]) -> list[ImportFile]:
    files: list[ImportFile] = []
    paths: set[str] = set()
    directories: set[str] = set()
    total = 0
    file_limit = settings.WORKTREE_MAX_FILE_BYTES
    for i, item in enumerate(items):
        where = f"files[{i}]"
        entry = fields(item, where, FILE)
        path = entry["path"]
        if path in paths:
            raise InvalidInput(f"{where}.path: {quoted(path)} is given twice.")
        parents = _directories_of(path)
        if path in directories or parents & paths:
            raise InvalidInput(f"{where}.path: {quoted(path)} is both a file and a directory.")
        paths.add(path)
        directories |= parents
        content = _decode(entry, where)
        if file_limit and len(content) > file_limit:
            raise InvalidInput(
                f"{where}: {quoted(path)} holds {len(content):,} bytes; a file may hold at most"
                f" {file_limit:,} (WORKTREE_MAX_FILE_BYTES)."
            )
        total += len(content)
        files.append(ImportFile(path, content, entry["executable"]))
    tree_limit = settings.WORKTREE_MAX_BYTES
    if tree_limit and total > tree_limit:
        raise InvalidInput(
            f"The files take {total:,} bytes; a worktree may hold at most {tree_limit:,}"
            " (WORKTREE_MAX_BYTES)."
        )
    return files


def _directories_of(path: str) -> set[str]:
    parts = path.split("/")[:-1]
    return {"/".join(parts[: i + 1]) for i in range(len(parts))}


def _decode(entry: dict[str, Any], where: str) -> bytes:
    if entry["encoding"] == TEXT:
        return entry["content"].encode("utf-8")
    return _base64(entry["content"], f"{where}.content")


def _base64(value: str, where: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"{where} is not base64.") from None


def check_objects(
    items: list[Any], files: list[ImportFile], missing: set[str]
) -> list[ImportObject]:
    """The snapshot objects, each checked against its id; the trees' entries checked and
    resolved; the file blobs the trees name added (the importer writes them as objects)."""
    objects: dict[str, ImportObject] = {}
    where_of: dict[str, str] = {}
    used = sum(len(f.content) for f in files)
    for i, item in enumerate(items):
        where = f"objects[{i}]"
        entry = fields(item, where, OBJECT)
        body = _base64(entry["data"], f"{where}.data")
        used += len(body)
        if used > settings.EXPORT_MAX_BYTES:
            raise InvalidInput(
                f"The files and snapshots take more than {settings.EXPORT_MAX_BYTES:,} bytes,"
                " the most an import holds (EXPORT_MAX_BYTES)."
            )
        if git_object_id(entry["type"], body) != entry["id"]:
            raise InvalidInput(f"{where}: its content does not match its id {entry['id']}.")
        if entry["id"] in objects:
            raise InvalidInput(f"{where}: the object {entry['id']} is given twice.")
        objects[entry["id"]] = ImportObject(entry["id"], entry["type"], body)
        where_of[entry["id"]] = where
    blobs = {blob_id(f.content): f.content for f in files}
    named_blobs: set[str] = set()
    for item in objects.values():
        if item.type == "tree":
            named_blobs |= _check_tree(item, where_of[item.id], objects, blobs, missing)
    extra = [ImportObject(sha, "blob", blobs[sha]) for sha in sorted(named_blobs - objects.keys())]
    return [*objects.values(), *extra]


def _check_tree(
    tree: ImportObject,
    where: str,
    objects: dict[str, ImportObject],
    blobs: dict[str, bytes],
    missing: set[str],
) -> set[str]:
    """A tree as git writes one, each entry there (or among the objects the export says its
    store had lost) and of its kind: the ids of the file blobs it names."""
    entries = _parse_tree(tree.body, where)
    names = [name for name, _mode, _sha in entries]
    ordered = sorted(entries, key=lambda e: e[0] + b"/" if e[1] == b"40000" else e[0])
    if len(set(names)) != len(names) or ordered != entries:
        raise InvalidInput(f"{where}: the tree's entries are not in git's order, or repeat.")
    named: set[str] = set()
    for name, mode, sha in entries:
        label = name.decode("utf-8", "replace")
        kind = TREE_MODES.get(mode)
        if kind is None:
            raise InvalidInput(
                f"{where}: the entry {quoted(label)} has a mode git trees of a"
                " worktree do not have (only files, links and directories)."
            )
        if (
            b"/" in name
            or len(name) > NAME_MAX
            or refused_component(name.decode("utf-8", "surrogateescape"))
        ):
            raise InvalidInput(f"{where}: the entry {quoted(label)} is not a name git accepts.")
        target = objects.get(sha)
        wanted = "tree" if kind == "tree" else "blob"
        if target is None and sha in blobs and wanted == "blob":
            named.add(sha)
            body = blobs[sha]
        elif target is not None and target.type == wanted:
            body = target.body
        elif (sha == snapshots.EMPTY_TREE and wanted == "tree") or (
            sha in missing and kind != "link"
        ):
            continue
        else:
            raise InvalidInput(
                f"{where}: the entry {quoted(label)} names the {wanted} {sha}, which the export"
                " lacks."
            )
        if kind == "link":
            _check_link_target(body, f"{where}: the link {quoted(label)}")
    return named


def _parse_tree(body: bytes, where: str) -> list[tuple[bytes, bytes, str]]:
    """``(name, mode, id)`` of each entry of a tree object's body."""
    entries, i = [], 0
    while i < len(body):
        space = body.find(b" ", i)
        nul = body.find(b"\0", space + 1) if space >= 0 else -1
        if space < 0 or nul < 0 or nul + 21 > len(body) or nul == space + 1:
            raise InvalidInput(f"{where}: not a well-formed git tree.")
        entries.append((body[space + 1 : nul], body[i:space], body[nul + 1 : nul + 21].hex()))
        i = nul + 21
    return entries


def _check_link_target(body: bytes, where: str) -> None:
    target = body.decode("utf-8", "surrogateescape")
    parts = target.split("/")
    if (
        not target
        or len(body) >= PATH_MAX
        or "\0" in target
        or target.startswith("/")
        or ".." in parts
    ):
        raise InvalidInput(
            f"{where} points at {quoted(target)}; a link must stay inside the worktree (a"
            " relative target without '..')."
        )
