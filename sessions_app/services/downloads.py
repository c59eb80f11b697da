"""Work out of a session (docs/semantics.md §13.3): the worktree at any point of any branch as an
archive, the change between two points as a patch (a unified diff, or a ``git am`` series
with one commit per user turn), read from the snapshots — exactly what they keep at that
point, never the live worktree (a run may be writing it).

Everything is read through the snapshot store's own git (``snapshots.Snapshots``: no
config, hooks or attributes of the worktree apply). An archive streams: blobs are read in
batches of at most ``DOWNLOAD_BATCH_BYTES`` and each batch leaves before the next is read,
so a 500 MB worktree never sits in a process's memory. A patch is measured before git writes
it (``patch_bytes``: the sizes of the files it changes) and refused past
``DOWNLOAD_PATCH_MAX_BYTES``; under that, git's output streams, cut at that bound should it
pass it all the same. Files the snapshots do not keep (larger than
``SNAPSHOT_MAX_FILE_BYTES``, ignored, unnamable) are listed — in the zip's comment, the tar's
PAX header, the patch's preamble and a response header — never dropped in silence.
"""

from __future__ import annotations

import io
import logging
import re
import stat
import tarfile
import time
import unicodedata
import zipfile
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from django.conf import settings

from core.errors import InvalidInput, NotFoundError
from core.mode import holds_worktrees
from workspace import skipped_files, snapshots, store, tree_objects, tree_reads

from ..models import Message, Session
from ..reads import snapshots_for_read
from ..selectors import active_path, files_at, fork_point
from . import revert_plan
from .changes import path_start

log = logging.getLogger(__name__)

ARCHIVE_FORMATS = ("zip", "tar.gz")
PATCH_FORMATS = ("diff", "mbox")
NOT_KEPT_LISTED = 200  # names a download lists of the files not kept (the count is whole)
SUBJECT_MAX = 72
BODY_MAX = 20_000
# What a patch writes for each file besides its contents (``diff --git``, ``index``, ``---``,
# ``+++`` and ``@@`` lines: the path four times), and for each commit of a mailbox besides its
# prompt (``From``, ``Date``, ``Subject`` lines; the prompt's letters MIME-encoded, up to 3
# bytes each).
FILE_HEADER_BYTES = 256
COMMIT_HEADER_BYTES = 512


@dataclass
class Point:
    """A point of a session: the path to a message (empty: before the first message), the
    files there, when it was, and the files the snapshots did not keep there."""

    path: list[Message]
    tree: str
    when: float
    not_kept: list[dict[str, str]] = field(default_factory=list)


def point(session: Session, message_id: str | None) -> Point:
    """The point after ``message_id`` (any branch of ``session``; default: the head, before a
    pending revert's boundary)."""
    leaf = fork_point(session, message_id or None)  # NotFoundError for another session's id
    path = active_path(session, leaf_id=leaf) if leaf else []
    tree = files_at(path, len(path)) or snapshots.EMPTY_TREE
    when = (path[-1] if path else session).created_at.timestamp()
    return Point(path=path, tree=tree, when=when, not_kept=_not_kept(session, path, leaf))


def _not_kept(session: Session, path: list[Message], leaf: str | None) -> list[dict[str, str]]:
    """At the head: what the snapshots skip in the worktree now. Earlier (and at the head in
    a process without worktrees): what the last step before the point recorded as skipped."""
    if leaf and leaf == session.head_id and not session.revert and holds_worktrees():
        try:
            return skipped_files.skipped(snapshots.for_session(session))
        except snapshots.SnapshotError:
            return []
    return _recorded_not_kept(path)


def _recorded_not_kept(path: list[Message]) -> list[dict[str, str]]:
    for message in reversed(path):
        for part in reversed(message.loaded_parts):
            if part.type == "step-finish":
                return list((part.data or {}).get("skipped") or [])
    return []


def not_kept_now(session: Session) -> dict:
    """The worktree's files the snapshots do not keep (``revert_plan.not_kept``: ``{count,
    files}``). In a process without worktrees: what the head's last step recorded (a file
    written since is not counted; the worktree is never looked at)."""
    if holds_worktrees():
        return revert_plan.not_kept(snapshots.for_session(session))
    skipped = _recorded_not_kept(active_path(session))
    return {"count": len(skipped), "files": skipped[: revert_plan.NOT_KEPT_LISTED]}


def not_kept_note(not_kept: list[dict[str, str]]) -> str:
    if not not_kept:
        return ""
    lines = [f"{len(not_kept)} files not kept by the snapshots (not in this download):"]
    lines += [f"  {item['path']} ({item.get('reason', '')})" for item in not_kept[:NOT_KEPT_LISTED]]
    if len(not_kept) > NOT_KEPT_LISTED:
        lines.append(f"  … and {len(not_kept) - NOT_KEPT_LISTED} more")
    return "\n".join(lines) + "\n"


def download_name(session: Session, extension: str) -> str:
    """A name any file system and any header takes: the title in ASCII letters, digits and
    dashes (the session's id when nothing is left), then ``extension``."""
    ascii_title = unicodedata.normalize("NFKD", session.title).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^A-Za-z0-9]+", "-", ascii_title).strip("-").lower()[:60].strip("-")
    return f"{slug or session.id}.{extension}"


# -- archives ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    path: str
    mode: int
    sha: str
    size: int


def entries(snap: snapshots.Snapshots, tree: str) -> list[Entry]:
    """Every file of ``tree`` (blobs: files, executables, symbolic links), by path."""
    return [Entry(*blob) for blob in tree_reads.blobs(snap, tree)]


class _Sink(io.RawIOBase):
    """What an archive writer writes, taken out in chunks (the writer cannot seek: a zip
    then carries data descriptors, a tar streams)."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # noqa: ANN001 - bytes-like
        self._chunks.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out = b"".join(self._chunks)
        self._chunks.clear()
        return out


def _batches(snap: snapshots.Snapshots, files: list[Entry]) -> Iterator[list[tuple[Entry, bytes]]]:
    limit = settings.DOWNLOAD_BATCH_BYTES
    batch: list[Entry] = []
    size = 0
    for entry in [*files, None]:
        if entry is not None and (not batch or size + entry.size <= limit):
            batch.append(entry)
            size += entry.size
            continue
        if batch:
            bodies = store.read_objects(snap, sorted({e.sha for e in batch}))
            yield [(e, bodies[e.sha][1]) for e in batch]
        batch, size = ([entry], entry.size) if entry is not None else ([], 0)


def archive(session: Session, at: Point, fmt: str) -> Iterator[bytes]:
    """The files of ``at`` as a ``fmt`` archive, in chunks."""
    if fmt not in ARCHIVE_FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(ARCHIVE_FORMATS)}.")
    snap = snapshots_for_read(session, at.tree)
    files = entries(snap, at.tree)  # read before the first chunk: a missing tree is a 404
    note = not_kept_note(at.not_kept)
    return _zip(snap, files, at, note) if fmt == "zip" else _tar(snap, files, at, note)


def _zip(snap: snapshots.Snapshots, files: list[Entry], at: Point, note: str) -> Iterator[bytes]:
    sink = _Sink()
    when = time.gmtime(max(at.when, 315532800))[:6]  # zip's dates start in 1980
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.comment = note.encode("utf-8")[:65535]
        for batch in _batches(snap, files):
            for entry, body in batch:
                info = zipfile.ZipInfo(entry.path, date_time=when)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.create_system = 3  # unix: the mode below is read
                info.external_attr = (_mode(entry.mode) & 0xFFFF) << 16
                archive.writestr(info, body)
            yield sink.take()
    yield sink.take()


def _tar(snap: snapshots.Snapshots, files: list[Entry], at: Point, note: str) -> Iterator[bytes]:
    sink = _Sink()
    headers = {"comment": note} if note else {}
    with tarfile.open(
        fileobj=sink, mode="w|gz", format=tarfile.PAX_FORMAT, pax_headers=headers
    ) as archive:
        for batch in _batches(snap, files):
            for entry, body in batch:
                info = tarfile.TarInfo(entry.path)
                info.mtime = int(at.when)
                info.mode = _mode(entry.mode) & 0o7777
                if stat.S_ISLNK(_mode(entry.mode)):
                    info.type = tarfile.SYMTYPE
                    info.linkname = body.decode("utf-8", "surrogateescape")
                    archive.addfile(info)
                else:
                    info.size = len(body)
                    archive.addfile(info, io.BytesIO(body))
            yield sink.take()
    yield sink.take()


def _mode(git_mode: int) -> int:
    if git_mode == 0o120000:
        return stat.S_IFLNK | 0o777
    return stat.S_IFREG | (0o755 if git_mode & 0o111 else 0o644)


# -- patches ---------------------------------------------------------------------------------
def patch(
    session: Session, *, from_id: str | None, to_id: str | None, fmt: str, author: str
) -> tuple[Iterator[bytes], int]:
    """The change from ``from_id`` (default: the files before the session's first step) to
    ``to_id`` (default: the head) — both on one branch, ``from`` first — as a unified diff
    (``git apply``) or a mailbox of one commit per user turn (``git am``), in chunks as git
    writes it; with the number of files not kept at ``to`` (listed in the text's preamble).
    A patch whose files are past ``DOWNLOAD_PATCH_MAX_BYTES`` (``patch_bytes``) is refused
    before git writes any of it."""
    if fmt not in PATCH_FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(PATCH_FORMATS)}.")
    to = point(session, to_id)
    start = 0
    if from_id:
        start = next((i + 1 for i, m in enumerate(to.path) if m.id == from_id), -1)
        if start < 0:
            if Message.objects.filter(id=from_id, session=session).exists():
                raise InvalidInput("from must be a message before to, on the same branch.")
            raise NotFoundError("No such message in this session.")
        base = files_at(to.path, start) or snapshots.EMPTY_TREE
    else:
        base = path_start(to.path) or snapshots.EMPTY_TREE
    snap = snapshots_for_read(session, base, to.tree, *_turn_trees(to.path, start, fmt))
    if fmt == "diff":
        _within_limit(patch_bytes(snap, [(base, to.tree)]))
        chunks = tree_reads.full_diff(snap, base, to.tree)
    else:
        chunks = _mailbox(snap, base, to.path, start, author, to.when)
    # Text before the first "diff --git" or "From " line: git apply and git am skip it.
    note = not_kept_note(to.not_kept)
    preamble = "".join(f"# {line}\n" for line in note.splitlines())
    first = next(chunks, b"")  # git failing at once is an error answer, not a 200
    return _capped(preamble.encode("utf-8", "surrogateescape"), first, chunks), len(to.not_kept)


def patch_bytes(snap: snapshots.Snapshots, pairs: Sequence[tuple[str, str]]) -> int:
    """What the diffs from the first to the second tree of each of ``pairs`` may take, read
    from the sizes of the files they change (``tree_reads.changed_sizes``: no diff written):
    each file's sizes before and after, a third more (git writes a binary file in base 85,
    5 letters for 4 bytes, in lines of 52 bytes: 1.29 times its size, at most), and its
    header. Text with very short lines can take more (each line's ``+``): the stream's cut
    is for that."""
    changed = tree_reads.changed_sizes(snap, pairs)
    return sum(size * 4 // 3 + FILE_HEADER_BYTES + 4 * len(path) for path, size in changed)


def _within_limit(estimate: int) -> None:
    if estimate > settings.DOWNLOAD_PATCH_MAX_BYTES:
        raise InvalidInput(
            f"The patch would be larger than {settings.DOWNLOAD_PATCH_MAX_BYTES:,} bytes "
            f"(about {estimate:,}): download an archive instead."
        )


def _capped(preamble: bytes, first: bytes, chunks: Iterator[bytes]) -> Iterator[bytes]:
    """``preamble``, then git's ``first`` chunk and the rest of ``chunks``, at most
    ``DOWNLOAD_PATCH_MAX_BYTES`` of them: past it git is killed. The answer's headers are
    sent by then, so a patch cut there, or by git failing after its first chunk, ends in a
    line that says so."""
    limit = settings.DOWNLOAD_PATCH_MAX_BYTES
    sent = 0
    chunk = first
    try:
        yield preamble
        while chunk:
            if sent + len(chunk) > limit:
                yield chunk[: limit - sent]
                yield (
                    f"\n# The patch was cut at {limit:,} bytes (DOWNLOAD_PATCH_MAX_BYTES): it is "
                    "incomplete; download an archive instead.\n"
                ).encode()
                return
            sent += len(chunk)
            yield chunk
            chunk = next(chunks, b"")
    except snapshots.SnapshotError:
        log.exception("a patch download failed after %d bytes", sent)
        yield b"\n# The patch could not be finished: it is incomplete; download an archive.\n"
    finally:
        if isinstance(chunks, Generator):
            chunks.close()  # kills git if it is still writing


def _mailbox(
    snap: snapshots.Snapshots,
    base: str,
    path: list[Message],
    start: int,
    author: str,
    when: float,
) -> Iterator[bytes]:
    """One commit per user turn after ``start`` that changed the files, each turn's prompt
    its message, chained from a commit of ``base``; ``git format-patch`` writes them out,
    once their diffs and prompts are known to fit ``DOWNLOAD_PATCH_MAX_BYTES``. Every
    commit's time is the session's (``when``: the point's), so the same download writes the
    same objects again, not new ones each time."""
    turns = _changing_turns(path, start, base)
    trees = [base, *(after for _, after, _ in turns)]
    text = sum(COMMIT_HEADER_BYTES + 3 * min(len(p), SUBJECT_MAX + BODY_MAX) for p, _, _ in turns)
    _within_limit(patch_bytes(snap, list(pairwise(trees))) + text)
    if not turns:
        return iter(())
    first = _commit(snap, base, None, "Files before these changes", _ident(author), when)
    tip = chain(snap, first, base, path, start, author)
    return tree_reads.format_patch(snap, first, tip)


def chain(
    snap: snapshots.Snapshots, parent: str, tree: str, path: list[Message], start: int, author: str
) -> str:
    """Commits on top of ``parent`` (whose tree is ``tree``): one per user turn of
    ``path[start:]`` that changed the files, its prompt the message, each turn's time the
    commit's. The last one's id (``parent`` when no turn changed anything). Also what a push
    sends (``repositories/push.py``)."""
    ident = _ident(author)
    for prompt, after, when in _changing_turns(path, start, tree):
        parent = _commit(snap, after, parent, prompt, ident, when)
    return parent


def _changing_turns(path: list[Message], start: int, tree: str) -> list[tuple[str, str, float]]:
    """(prompt, files after, time) of each user turn of ``path[start:]`` that changed the
    files (``tree`` before the first)."""
    changing = []
    for prompt, end, when in _turns(path, start):
        after = files_at(path, end) or snapshots.EMPTY_TREE
        if after != tree:
            changing.append((prompt, after, when))
            tree = after
    return changing


def _turn_trees(path: list[Message], start: int, fmt: str) -> list[str]:
    """The files after each user turn of ``path[start:]`` (what a mailbox's commits hold)."""
    if fmt != "mbox":
        return []
    return [files_at(path, end) or snapshots.EMPTY_TREE for _, end, _ in _turns(path, start)]


def _turns(path: list[Message], start: int) -> list[tuple[str, int, float]]:
    """(prompt, index after the turn's last message, time) of each user turn in
    ``path[start:]``; what precedes the first user message there is a turn of its own."""
    turns: list[tuple[str, int, float]] = []
    for index in range(start, len(path)):
        message = path[index]
        if message.role == Message.Role.USER or not turns:
            text = "".join(p.text for p in message.loaded_parts if p.type == "text")
            if message.role != Message.Role.USER:
                text = "Continued work"
            turns.append((text, index + 1, message.created_at.timestamp()))
        else:
            prompt, _, when = turns[-1]
            turns[-1] = (prompt, index + 1, when)
    return turns


def _ident(name: str) -> str:
    clean = re.sub(r"[<>\n\r\0]", "", name).strip() or "agentplat"
    return f"{clean} <{re.sub(r'[^A-Za-z0-9._-]', '', clean) or 'agent'}@agentplat.invalid>"


def _commit(
    snap: snapshots.Snapshots, tree: str, parent: str | None, prompt: str, ident: str, when: float
) -> str:
    text = prompt.replace("\0", "").strip() or "(empty prompt)"
    subject, _, body = text.partition("\n")
    subject = subject.strip()
    if len(subject) > SUBJECT_MAX:
        subject, body = subject[: SUBJECT_MAX - 1] + "…", text
    body = body.strip()[:BODY_MAX]
    stamp = f"{int(when)} +0000"
    lines = [f"tree {tree}"]
    if parent:
        lines.append(f"parent {parent}")
    lines += [f"author {ident} {stamp}", f"committer {ident} {stamp}", "", subject]
    if body:
        lines += ["", body]
    return tree_objects.write_object(snap, "commit", ("\n".join(lines) + "\n").encode("utf-8"))
