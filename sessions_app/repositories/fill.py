"""Real code in (docs/semantics.md §13): a session started from a git repository or an uploaded
archive.

* **Clone.** ``create_session(repository=…)`` stores the session ``preparing``, its busy lock
  held by a prepare job (``jobs.hold_for_clone``, through ``lock.hold_for_job``) with a lease
  that outlasts ``REPO_CLONE_TIMEOUT``, so no run and no history move starts while the
  worktree fills. The job (``prepare``: a Celery task in services mode, a thread in embedded
  mode; ``jobs.py`` starts it) clones into a
  staging directory beside the worktrees (``repos.run``: bounded, cancellable, hostile
  content), then — holding the session row, and only while its job still holds the busy
  lock (a stale job writes nothing) — moves the files in, seeds the snapshot store with the
  clone's own index and packs (no file is hashed again), and records the clone as the
  session's first message: its patch part names every file, so a revert to it gives the
  empty worktree and an unrevert gives the clone back (docs/semantics.md §13.1).
* **Upload.** ``fill_from_upload``: the same, in the request: ``unpack`` checks every
  member (links, devices, ``..``, sizes, ratios) before anything is kept. A web process that
  holds no worktree records it through the central store instead (``upload_store``).

The request itself is checked first (``checks.check_repository``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone

from core import ids
from core.errors import ConflictError, InvalidInput, NotFoundError
from quotas_app.limits import effective
from realtime import events
from workspace import (
    change_journal,
    kept_usage,
    repo_tree,
    repos,
    sandbox,
    seeding,
    shared_checkouts,
    snapshots,
    unpack,
)
from workspace.unpack_checks import ArchiveRefused

from .. import rehome, replicas
from ..models import HistoryEvent, Message, Part, Session
from ..selectors import session_data
from ..services import lock
from ..services.changes import changes_summary, path_start
from .credentials import secret_for

log = logging.getLogger(__name__)
COMMIT = re.compile(r"[0-9a-f]{40}")
STAGING = ".staging"


def emptied(worktree: Path) -> None:
    """Empty the worktree (a clone that failed or was cancelled); its next snapshot and its
    next bound check walk it (``change_journal``, ``kept_usage``)."""
    shutil.rmtree(worktree, ignore_errors=True)
    worktree.mkdir(parents=True, exist_ok=True)
    change_journal.forget(worktree)
    kept_usage.forget(worktree)


# -- clone -------------------------------------------------------------------------------------


def _held(session_id: str, job: str) -> bool:
    close_old_connections()
    return lock.held_by(session_id, job)


def prepare(session_id: str, job: str) -> None:
    """The prepare job: clone the session's repository and record it (see the module)."""
    session = Session.objects.filter(id=session_id, busy_run_id=job).first()
    if session is None:
        return  # deleted (cancelled) or taken over: nothing to do
    rehome.on_claim(session)  # a dead home moves here (a clone has no replicated files yet)
    source = dict(session.source)
    staging = _staging(session)
    try:
        remote = repos.check_url(source["url"])  # again: git goes to the addresses checked now
        secret = secret_for(session.owner_id, source.get("credential_id"), remote)
        watch = repos.Watch(
            deadline=time.monotonic() + settings.REPO_CLONE_TIMEOUT,
            max_bytes=_byte_limit(session),
            max_files=settings.REPO_MAX_FILES,
            on_progress=lambda phase, done, total: events.publish(
                session_id, events.SESSION_PREPARE, phase=phase, done=done, total=total
            ),
            cancelled=lambda: not _held(session_id, job),
        )
        tree_dir = staging / "tree"
        share = sandbox.uses_layers(session.worktree)
        commit, tree = _fetch(remote, secret, source, tree_dir, watch, share=share)
        source["commit"] = commit
        ref = f" ({source['ref']})" if source["ref"] else ""
        text = (
            f"Cloned {remote.url}{ref} at {commit[:12]}: {tree.files:,} files, "
            f"{tree.bytes:,} bytes."
        )
        _finish(session_id, job, tree_dir, source, text, seed=True)
    except repos.RepoCancelled:
        failure = None
    except NotFoundError as exc:
        # The session went (deleted: a cancel; nothing to say) or the credential did.
        failure = exc.message if _held(session_id, job) else None
    except (repos.RepoError, InvalidInput) as exc:
        failure = str(getattr(exc, "message", exc))
    except Exception:
        log.exception("session %s: the clone failed", session_id)
        failure = "The clone failed on the server."
    else:
        failure = None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if failure:  # after the staging is gone: "idle" means nothing of the clone is left
        fail(session_id, job, failure)


def _byte_limit(session: Session) -> int:
    """``REPO_MAX_BYTES``, and no more than the owner's worktree quota (0: no limit)."""
    bounds = [x for x in (settings.REPO_MAX_BYTES, effective(session.owner_id).worktree_bytes) if x]
    return min(bounds) if bounds else 0


def _staging(session: Session) -> Path:
    root = Path(settings.WORKSPACE_ROOT) / STAGING
    root.mkdir(parents=True, exist_ok=True)
    directory = root / f"{session.id}-{ids.prepare_id()}"
    directory.mkdir(mode=0o700)
    return directory


def _fetch(
    remote: repos.Remote,
    secret,
    source: dict,
    tree: Path,
    watch: repos.Watch,  # noqa: ANN001
    *,
    share: bool,
) -> tuple[str, repo_tree.TreeCount]:
    """Clone ``remote`` into ``tree``: the commit checked out, and what its tree holds. The
    objects come first, without a checkout; the commit's tree is measured against the limits
    (``repo_tree``), and only then are its files written. ``share``: the files of an earlier
    clone of the same tree are linked instead, where kept (``shared_checkouts``)."""
    ref, depth = source.get("ref") or "", int(source.get("depth") or 0)
    shallow = [f"--depth={depth}"] if depth else []

    def git(*args: str, cwd: Path, on_watch: repos.Watch = watch) -> repos.Result:
        result = repos.run(
            args, remote=remote, secret=secret, watch=on_watch, cwd=cwd,
            host_key=source.get("host_key", ""),
        )  # fmt: skip
        if result.host_key:
            source["host_key"] = result.host_key  # pinned for the push
        return result

    target, checkout = _objects(git, remote.pinned_url, ref, shallow, tree)
    head = git("rev-parse", "--verify", f"{target}^{{commit}}", cwd=tree)
    _ok(head, "The clone")
    commit = head.stdout.strip()
    count = repo_tree.TreeCount(
        max_bytes=watch.max_bytes,
        max_files=watch.max_files,
        max_entries=settings.WORKTREE_MAX_ENTRIES,
    )
    listing = dataclasses.replace(watch, on_stdout=count.feed, on_progress=None)
    _ok(git("ls-tree", "-r", "-t", "-l", "-z", commit, cwd=tree, on_watch=listing), "The clone")
    tree_id = git("rev-parse", "--verify", f"{commit}^{{tree}}", cwd=tree).stdout.strip()
    linked = share and shared_checkouts.link_into(tree_id, tree)
    attributes = repo_tree.neutral_attributes(tree / ".git")
    _ok(git("checkout", "--progress", "-q", *checkout, cwd=tree), "The clone")
    attributes.unlink()
    if share and not linked:
        shared_checkouts.keep(tree_id, tree)
    # Its files may be hard links shared with other worktrees: a link changes a file's ctime,
    # never its content, so git in the worktree tells a change by inode, size and mtime.
    _ok(git("config", "core.trustctime", "false", cwd=tree), "The clone")
    # The worktree's repository names its origin as the user gave it (not the pinned address).
    _ok(git("remote", "set-url", "origin", remote.url, cwd=tree), "The clone")
    branch = git("symbolic-ref", "--quiet", "--short", "HEAD", cwd=tree)
    source["branch"] = branch.stdout.strip()[:200] if branch.code == 0 else ""
    return commit, count


def _objects(
    git: Callable[..., repos.Result], url: str, ref: str, shallow: list[str], tree: Path
) -> tuple[str, tuple[str, ...]]:
    """The objects of ``ref`` (a commit id, a branch or a tag; '' the default branch) fetched
    into the new repository ``tree``, nothing checked out: what names the commit, and the
    arguments of its checkout."""
    if COMMIT.fullmatch(ref):
        tree.mkdir()
        for args in (("init", "-q", "--template=", "."), ("remote", "add", "origin", url)):
            _ok(git(*args, cwd=tree), "The clone")
        _ok(
            git("fetch", "--progress", "--no-tags", *shallow, "origin", ref, cwd=tree),
            "The clone",
        )
        return "FETCH_HEAD", ("--detach", "FETCH_HEAD")
    branch = ["--branch", ref] if ref else []
    _ok(
        git(
            "clone", "--progress", "--template=", "--no-tags", "--single-branch",
            "--no-recurse-submodules", "--no-checkout", *shallow, *branch, "--", url, "tree",
            cwd=tree.parent,
        ),
        "The clone",
    )  # fmt: skip
    return "HEAD", ()


def _ok(result: repos.Result, what: str) -> None:
    if result.code != 0:
        raise repos.RepoError(repos.failure_sentence(result, what))


def _finish(
    session_id: str, job: str | None, tree: Path, source: dict, text: str, *, seed: bool
) -> Session:
    """Move ``tree`` in as the session's worktree and record it as the first history event,
    holding the session row; with ``job``, only while that job still holds the busy lock.
    Git hashes the files before the row is locked (``_snapshot_staged``): a tree of 50,000
    files held a transaction open longer than PostgreSQL lets one idle."""
    after, index = _snapshot_staged(session_id, job, tree, seed=seed)
    try:
        recorded = _record_tree(session_id, job, tree, source, text, after, index)
        # The first snapshot goes to the central store (off without SNAPSHOT_REMOTE).
        replicas.replicate(session_id, snapshots.for_session(recorded), after)
        return recorded
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(index)


def _snapshot_staged(
    session_id: str, job: str | None, tree: Path, *, seed: bool
) -> tuple[str, str]:
    """The staged tree's snapshot, its objects in the store and its index in a scratch file
    beside the git dir (the session's own index is not written before the row is held): the
    tree id and that file. A clone's index and packs are seeded first (the job holds the
    session: nothing else writes its git dir)."""
    session = Session.objects.get(id=session_id)
    staged = dataclasses.replace(snapshots.for_session(session), worktree=tree)
    staged.ensure()
    if seed and job is not None:
        _seed(staged, tree / ".git")
    index = str(staged.git_dir / f"index.staged-{os.getpid()}-{time.monotonic_ns()}")
    seeded = staged.git_dir / "index"
    if seed and job is not None and seeded.is_file():
        shutil.copy2(seeded, index)
    return staged.track(index=index), index


def _record_tree(
    session_id: str, job: str | None, tree: Path, source: dict, text: str, after: str, index: str
) -> Session:
    with transaction.atomic():
        locked = lock.lock_session(session_id)
        if job is not None and locked.busy_run_id != job:
            raise repos.RepoCancelled("The session was taken over.")
        if job is None and (locked.head_id or lock.is_busy(locked)):
            raise ConflictError("The session is not new any more.")
        worktree = locked.worktree
        snap = snapshots.for_session(locked)
        if worktree.exists():
            worktree.rmdir()  # the empty worktree made with the session
        os.rename(tree, worktree)
        try:
            seeding.adopt(snap, index, after)
            record_first_message(locked, job, snap, source, text, after)
        except BaseException:
            # Nothing is recorded: the files go too, and the worktree is empty again.
            emptied(worktree)
            raise
        events.publish_on_commit(session_id, events.SESSION_UPDATED, session=session_data(locked))
    return locked


def record_first_message(
    locked: Session,
    job: str | None,
    snap: snapshots.Snapshots,
    source: dict,
    text: str,
    after: str,
) -> Message:
    """(The session row held.) The clone's or upload's first message — its text, its step
    and the patch part that names every file of ``after`` — the session released idle with it
    as its head, and the history event. ``snap``: any store that holds ``after``."""
    files = snap.patch(snapshots.EMPTY_TREE, after)
    message = Message.objects.create(
        session=locked, role=Message.Role.USER, completed_at=timezone.now()
    )
    kind = source.get("type", "git")
    rows = [
        (Part.Type.TEXT, text, {"source": kind}),
        (Part.Type.STEP_START, "", {"snapshot": after, "step": 0, "source": kind}),
        (Part.Type.STEP_FINISH, "", {"snapshot": after, "step": 0}),
        (Part.Type.PATCH, "", {"snapshot": snapshots.EMPTY_TREE, "files": files}),
    ]
    Part.objects.bulk_create(
        Part(message=message, session=locked, order=i, type=t, text=body, data=data)
        for i, (t, body, data) in enumerate(rows)
    )
    message.loaded_parts = list(message.parts.order_by("order"))
    _release(locked, job, source, message, snap, after)
    return message


def _release(
    locked: Session,
    job: str | None,
    source: dict,
    message: Message,
    snap,
    after: str,  # noqa: ANN001
) -> None:
    """The session idle with the files as its head, and the history event."""
    locked.head = message
    locked.source = source
    locked.summary = changes_summary(snap, path_start([message]), after)
    if job is not None and not lock.release_job(locked.id, job, locked):
        raise repos.RepoCancelled("The session was taken over.")
    locked.save(update_fields=["head", "source", "summary", "updated_at"])
    kind = source.get("type", "git")
    HistoryEvent.objects.create(
        session=locked,
        kind=kind if kind == "upload" else "clone",
        data={k: v for k, v in source.items() if k != "credential_id"}
        | {"message_id": message.id, "snapshot": after},
    )


def _seed(snap: snapshots.Snapshots, git_dir: Path) -> None:
    """The snapshot store takes the clone's own objects and index (read while the job still
    holds the session: nothing of the agent's is in them yet), so the first snapshot costs a
    stat walk, not a hash of every file; and its ``shallow`` list, so a push stops there."""
    packs = sorted((git_dir / "objects" / "pack").glob("pack-*.*"))
    index = git_dir / "index"
    if index.is_file():
        seeding.seed(snap, index, [p for p in packs if p.suffix in (".pack", ".idx")])
    shallow = git_dir / "shallow"
    if shallow.is_file() and not shallow.is_symlink():
        shutil.copyfile(shallow, snap.git_dir / "shallow")


def fail(session_id: str, job: str, sentence: str) -> None:
    """The clone did not happen: the session is idle with an empty worktree and
    ``source.error``; only while ``job`` still holds it."""
    with transaction.atomic():
        try:
            locked = lock.lock_session(session_id)
        except NotFoundError:
            return  # deleted meanwhile (a cancel): nothing to record
        if locked.busy_run_id != job:
            return
        emptied(locked.worktree)
        locked.source = {**locked.source, "error": sentence[:500]}
        lock.release_job(session_id, job, source=locked.source, updated_at=timezone.now())
        locked.refresh_from_db()
        events.publish_on_commit(session_id, events.SESSION_UPDATED, session=session_data(locked))


# -- upload ------------------------------------------------------------------------------------
Recorder = Callable[[str, Path, dict, str], Session]


def fill_from_upload(
    *,
    session: Session,
    name: str,
    fileobj=None,  # noqa: ANN001
    files=None,  # noqa: ANN001
    record: Recorder | None = None,
    strip_top: bool = False,
) -> Session:
    """Fill a new, empty ``session``'s worktree with an uploaded archive's files (or a
    dropped folder's) and record it as its first history event; refused whole, with the
    session deleted and nothing kept, when ``unpack`` refuses it. ``record`` (session id,
    unpacked tree, source, text): how the tree is recorded, unpacked in a scratch directory
    outside ``WORKSPACE_ROOT`` (``upload_store``: a web process that holds no worktree);
    default, moved in as the worktree (``_finish``). ``strip_top``: the upload's single
    top-level folder (``proj/``) is dropped, its contents the worktree (``_strip_top``);
    refused when the upload holds anything else at its top."""
    staging = _staging(session) if record is None else Path(tempfile.mkdtemp(prefix="upload-"))
    tree = staging / "tree"
    limits = {
        "max_bytes": _byte_limit(session),
        "max_files": settings.REPO_MAX_FILES,
        "deadline": time.monotonic() + settings.REPO_CLONE_TIMEOUT,
    }
    try:
        if files is not None:
            done = unpack.unpack_files(files, tree, **limits)
        else:
            done = unpack.unpack_archive(fileobj, tree, name=name, **limits)
        tree.mkdir(exist_ok=True)
        top = _strip_top(tree) if strip_top else ""
        source = {"type": "upload", "name": name[:200], "files": done.files}
        without = f" without its top folder {top}/" if top else ""
        text = (
            f"Uploaded {name or 'a folder'}{without}: {done.files:,} files, {done.bytes:,} bytes."
        )
        if record is not None:
            return record(session.id, tree, source, text)
        return _finish(session.id, None, tree, source, text, seed=False)
    except ArchiveRefused as exc:
        _drop(session)
        raise InvalidInput(str(exc)) from None
    except snapshots.SnapshotError as exc:
        # Its files could not be recorded (git past SNAPSHOT_GIT_TIMEOUT_SECONDS on a tree of
        # many files): refused with a sentence, like a refused archive, nothing kept.
        _drop(session)
        log.warning("session %s: the upload could not be recorded: %s", session.id, exc)
        raise InvalidInput(
            "The upload's files could not be recorded in time: upload fewer files, or clone "
            "the repository instead."
        ) from None
    except BaseException:
        _drop(session)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _strip_top(tree: Path) -> str:
    """Make the single folder at the top of the unpacked ``tree`` the tree itself (renames in
    the scratch directory; nothing is copied): its name. Refused (``ArchiveRefused``) when the
    top holds anything but one folder."""
    entries = sorted(tree.iterdir())
    if len(entries) != 1 or entries[0].is_symlink() or not entries[0].is_dir():
        shown = ", ".join(e.name for e in entries[:5]) + (", …" if len(entries) > 5 else "")
        raise ArchiveRefused(
            "strip_top_folder needs an upload with a single folder at its top; this one holds "
            f"{len(entries)} top-level entries ({shown or 'nothing'}). Nothing was uploaded."
        )
    top = entries[0]
    outer = tree.with_name(tree.name + "-outer")
    tree.rename(outer)
    (outer / top.name).rename(tree)
    outer.rmdir()
    return top.name


def _drop(session: Session) -> None:
    Session.objects.filter(id=session.id).delete()
    shutil.rmtree(session.worktree, ignore_errors=True)
    shutil.rmtree(session.snapshot_dir, ignore_errors=True)
