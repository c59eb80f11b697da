"""Reading what git prints: the records of ``ls-tree``, ``diff-tree --raw --numstat`` (and
``--raw --stdin``), ``cat-file --batch`` and ``--batch-check``, ``rev-list --objects``,
``blame --incremental``, ``merge-tree --write-tree`` and ``ls-files --stage``, and the body of
a tree object.

Pure functions of git's output, no git run here: ``Snapshots`` (``snapshots.py``) runs the
commands, always with ``-z`` where git offers it, so a path is taken as git wrote it (any byte
but NUL, decoded with ``surrogateescape``) and never unquoted or split on a space.
"""

from __future__ import annotations

import re
from typing import NamedTuple

OBJECT_ID = re.compile(r"[0-9a-f]{40}")
# 0o160000 (a gitlink, a submodule's entry) as ``ls-files --stage`` prints its mode.
GITLINK = "160000"


class TreeEntry(NamedTuple):
    """One record of ``ls-tree -r -l -z``: ``size`` as git prints it ("-" for a gitlink)."""

    mode: str
    kind: str
    sha: str
    size: str
    path: str


def tree_entries(out: str) -> list[TreeEntry]:
    """The records of ``ls-tree -r -l -z``, in git's order."""
    found = []
    for record in filter(None, out.split("\0")):
        meta, _, name = record.partition("\t")
        mode, kind, sha, size = meta.split()
        found.append(TreeEntry(mode, kind, sha, size, name))
    return found


def tree_blobs(out: str) -> dict[str, tuple[str, str]]:
    """``{path: (mode, id)}`` of the blobs in the records of ``ls-tree -r -z`` (no sizes)."""
    entries = {}
    for record in filter(None, out.split("\0")):
        meta, _, name = record.partition("\t")
        mode, kind, sha = meta.split()
        if kind == "blob":
            entries[name] = (mode, sha)
    return entries


def names(out: str) -> list[str]:
    """The paths of a ``-z --name-only`` listing (``ls-tree``, ``diff-tree``, ``ls-files``)."""
    return [name for name in out.split("\0") if name]


def diff_stat(out: str) -> list[dict]:
    """Per file, from ``diff-tree -r --no-renames --raw --numstat -z``: the raw records (the
    status) come first, then the numstat records (the line counts; ``-`` for a binary file).
    Sorted by path."""
    fields = out.split("\0")
    states: dict[str, str] = {}
    result = []
    i = 0
    while i < len(fields):
        field = fields[i]
        if field.startswith(":"):
            states[fields[i + 1]] = field.split()[-1]
            i += 2
            continue
        if not field:
            i += 1
            continue
        add, dele, name = field.split("\t", 2)
        binary = add == "-" and dele == "-"
        result.append(
            {
                "file": name,
                "status": {"A": "added", "D": "deleted"}.get(states.get(name, "M"), "modified"),
                "additions": 0 if binary else int(add),
                "deletions": 0 if binary else int(dele),
                "binary": binary,
            }
        )
        i += 1
    return sorted(result, key=lambda r: r["file"])


def raw_changes(out: str) -> list[tuple[str, str, str]]:
    """``(path, id before, id after)`` of each record of ``diff-tree -r -z --no-renames
    --stdin`` (an absent side: the zero id). A path is always the field after its record's
    own, so a name that looks like a record is never read as one; the line naming a pair's
    two trees, which ``--stdin`` writes before the pair's records, is skipped."""
    fields = out.split("\0")
    found = []
    i = 0
    while i < len(fields) - 1:
        record = fields[i].rpartition("\n")[2]  # after the trees' line, if there is one
        if record.startswith(":"):
            _, _, before, after, _ = record.split(" ")
            found.append((fields[i + 1], before, after))
            i += 2
        else:
            i += 1
    return found


def batch_objects(data: bytes, count: int) -> list[tuple[bytes, bytes] | None]:
    """``(type, body)`` of each of the ``count`` records of ``cat-file --batch``, in the order
    asked; None for one git reports missing (``<name> missing``)."""
    found: list[tuple[bytes, bytes] | None] = []
    offset = 0
    for _ in range(count):
        header_end = data.index(b"\n", offset)
        header = data[offset:header_end].split()
        if len(header) != 3 or header[-1] == b"missing":
            found.append(None)
            offset = header_end + 1
            continue
        start, size = header_end + 1, int(header[2])
        found.append((header[1], data[start : start + size]))
        offset = start + size + 1  # the body is followed by a newline
    return found


def batch_check(out: bytes) -> list[tuple[str, str, int]]:
    """``(id, type, size)`` of each object ``cat-file --batch-check`` found (the missing
    ones left out)."""
    found = []
    for line in out.decode("ascii", "replace").splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2].isdigit():
            found.append((fields[0], fields[1], int(fields[2])))
    return found


def rev_list_objects(out: bytes) -> tuple[set[str], set[str]]:
    """From ``rev-list --objects --missing=print``: the ids of the objects it reached, and
    those it found named but missing (printed with a leading ``?``)."""
    present, missing = set(), set()
    for line in out.splitlines():
        if line.startswith(b"?"):
            missing.add(line[1:41].decode("ascii", "replace"))
        elif len(line) >= 40:
            present.add(line[:40].decode("ascii", "replace"))
    return present, missing


def blame_groups(out: str) -> list[tuple[int, int, str]]:
    """``(start, end, commit)`` of each group of ``blame --incremental`` (1-based lines,
    ``end`` included), in line order. A group starts with ``<commit> <orig> <start> <count>``
    and ends with its ``filename`` line; the header lines between are skipped."""
    groups, in_group = [], False
    for line in out.split("\n"):
        if not in_group:
            fields = line.split(" ")
            if len(fields) == 4 and OBJECT_ID.fullmatch(fields[0]):
                start, count = int(fields[2]), int(fields[3])
                groups.append((start, start + count - 1, fields[0]))
                in_group = True
        elif line.startswith("filename "):  # the last header line of a group
            in_group = False
    return sorted(groups)


def merge_tree(out: bytes) -> tuple[str, list[str]]:
    """From ``merge-tree --write-tree --name-only -z --no-messages``: the tree it wrote (the
    caller checks it is an id), and each conflicted path once, in git's order."""
    fields = out.decode("utf-8", "surrogateescape").split("\0")
    tree, conflicts = fields[0].strip(), []
    for name in fields[1:]:
        if not name:
            break
        if name not in conflicts:
            conflicts.append(name)
    return tree, conflicts


def gitlinks(out: str) -> list[str]:
    """The paths of the gitlinks (submodule entries) in ``ls-files --stage -z``."""
    return [
        entry.partition("\t")[2]
        for entry in out.split("\0")
        if entry.startswith(f"{GITLINK} ") and "\t" in entry
    ]


def staged_ids(out: bytes) -> set[str]:
    """The object ids that the entries of ``ls-files --stage -z`` name."""
    ids = set()
    for entry in out.split(b"\0"):
        fields = entry.split(b" ", 2)  # "<mode> <sha> <stage>\t<path>"
        sha = fields[1].decode("ascii", "replace") if len(fields) == 3 else ""
        if OBJECT_ID.fullmatch(sha):
            ids.add(sha)
    return ids


def parse_tree(body: bytes) -> dict[bytes, tuple[bytes, bytes]]:
    """``{name: (mode, raw id)}`` of a tree object's body (``<mode> <name>\\0<20 bytes>``…)."""
    entries, i = {}, 0
    while i < len(body):
        space = body.index(b" ", i)
        nul = body.index(b"\0", space)
        entries[body[space + 1 : nul]] = (body[i:space], body[nul + 1 : nul + 21])
        i = nul + 21
    return entries


def tree_body(entries: dict[bytes, tuple[bytes, bytes]]) -> bytes:
    """A tree object's body from ``{name: (mode, raw id)}``, in git's order: a directory
    sorts as if its name ended with ``/``."""

    def order(name: bytes) -> bytes:
        return name + b"/" if entries[name][0] == b"40000" else name

    return b"".join(
        entries[n][0] + b" " + n + b"\0" + entries[n][1] for n in sorted(entries, key=order)
    )
