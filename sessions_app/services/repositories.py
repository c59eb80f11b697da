"""Real code in, real work out (SEMANTICS 13): a session started from a git repository or an
uploaded archive, a push of its work, and the user's saved credentials.

* **Clone.** ``create_session(repository=…)`` stores the session ``preparing``, its busy lock
  held by a prepare job (``ids.prepare_id``) with a lease that outlasts
  ``REPO_CLONE_TIMEOUT``, so no run and no history move starts while the worktree fills. The
  job (``prepare``: a Celery task in services mode, a thread in embedded mode) clones into a
  staging directory beside the worktrees (``repos.run``: bounded, cancellable, hostile
  content), then — holding the session row, and only while its job still holds the busy
  lock (a stale job writes nothing) — moves the files in, seeds the snapshot store with the
  clone's own index and packs (no file is hashed again), and records the clone as the
  session's first message: its patch part names every file, so a revert to it gives the
  empty worktree and an unrevert gives the clone back (13.1).
* **Upload.** ``fill_from_upload``: the same, in the request: ``unpack`` checks every
  member (links, devices, ``..``, sizes, ratios) before anything is kept.
* **Push.** One commit per user turn on top of the cloned commit, built from the snapshots
  in the session's own snapshot store (never the worktree's ``.git``, which the agent may
  have changed), pushed to the session's origin (``source.url``, never a remote the
  worktree names) under the branch the user names: never forced (13.2).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from core import ids
from core.errors import ConflictError, InvalidInput, NotFoundError
from quotas_app.limits import effective
from realtime import events
from workspace import repos, snapshots, unpack

from .. import vault
from ..models import Credential, HistoryEvent, Message, Part, Session
from ..selectors import session_data
from . import downloads, lock
from .revert import changes_summary, path_start

log = logging.getLogger(__name__)
COMMIT = re.compile(r"[0-9a-f]{40}")
REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/+-]{0,199}$")
DEPTH_MAX = 1_000_000
STAGING = ".staging"


# -- credentials -----------------------------------------------------------------------------
def credential_data(credential: Credential) -> dict:
    return {
        "id": credential.id,
        "name": credential.name,
        "host": credential.host,
        "kind": credential.kind,
        "created_at": credential.created_at.isoformat().replace("+00:00", "Z"),
    }


def save_credential(*, owner, name: str, host: str, kind: str, secret: str) -> Credential:  # noqa: ANN001
    """A new credential of ``owner`` (its shape checked by the API's serializer)."""
    if owner.git_credentials.count() >= settings.CREDENTIALS_PER_USER_MAX:
        raise InvalidInput(
            f"You have {settings.CREDENTIALS_PER_USER_MAX} saved credentials already: delete "
            "one first."
        )
    return Credential.objects.create(
        owner=owner, name=name, host=host.lower(), kind=kind, secret=vault.seal(secret)
    )


def credentials_of(owner) -> list[dict]:  # noqa: ANN001
    rows = Credential.objects.filter(owner=owner)[: settings.CREDENTIALS_PER_USER_MAX]
    return [credential_data(c) for c in rows]


def delete_credential(*, owner, credential_id: str) -> None:  # noqa: ANN001
    """Delete one of ``owner``'s credentials; sessions that named it push and clone without
    it from then on (their ``source`` keeps only its id)."""
    deleted, _ = Credential.objects.filter(owner=owner, id=credential_id).delete()
    if not deleted:
        raise NotFoundError("No such credential.")


def _secret_for(owner_id: int, credential_id: str | None, remote: repos.Remote):
    if not credential_id:
        return None
    credential = Credential.objects.filter(id=credential_id, owner_id=owner_id).first()
    if credential is None:
        raise NotFoundError("No such credential.")
    if credential.host != remote.host:
        raise InvalidInput(
            f"The credential {credential.name!r} is for {credential.host}, not {remote.host}: "
            "a credential is only ever sent to its own host."
        )
    if credential.kind == Credential.Kind.SSH_KEY and remote.scheme != "ssh":
        raise InvalidInput("An ssh key is for ssh:// URLs; use an access token for https.")
    if credential.kind == Credential.Kind.TOKEN and remote.scheme != "https":
        raise InvalidInput("An access token is for https:// URLs.")
    try:
        return repos.Secret(credential.kind, vault.unseal(credential.secret))
    except vault.SecretUnreadable as exc:
        raise InvalidInput(str(exc)) from None


# -- clone -------------------------------------------------------------------------------------
def check_repository(owner, repository: dict) -> dict:  # noqa: ANN001
    """The session's ``source`` for ``repository`` ({url, ref?, depth?, credential_id?}),
    every part checked before anything is stored: the URL and its host (``repos.check_url``),
    the ref's shape, the credential (the owner's, for that host)."""
    try:
        remote = repos.check_url(repository.get("url"))
    except repos.RepoError as exc:
        raise InvalidInput(f"repository.url: {exc}") from None
    ref = repository.get("ref") or ""
    if not isinstance(ref, str) or (ref and (not REF.match(ref) or ".." in ref)):
        raise InvalidInput("repository.ref must be a branch, a tag or a commit id.")
    depth = repository.get("depth", 1)
    if depth is None:
        depth = 1
    if not isinstance(depth, int) or isinstance(depth, bool) or not 0 <= depth <= DEPTH_MAX:
        raise InvalidInput("repository.depth must be a whole number (0: the whole history).")
    credential_id = repository.get("credential_id") or None
    if credential_id is not None and not isinstance(credential_id, str):
        raise InvalidInput("repository.credential_id must be a credential's id.")
    _secret_for(owner.pk, credential_id, remote)  # refused now, not in the job
    source = {"type": "git", "url": remote.url, "ref": ref, "depth": depth, "commit": None}
    if credential_id:
        source["credential_id"] = credential_id
    return source


def hold_for_clone(session: Session) -> str:
    """Inside the transaction that creates ``session``: hold its busy lock for the prepare
    job (whose id this returns) and enqueue the job after the commit."""
    job = ids.prepare_id()
    lease = timedelta(seconds=settings.REPO_CLONE_TIMEOUT + 120)
    Session.objects.filter(id=session.id).update(
        status=Session.Status.PREPARING, busy_run_id=job, lease_expires_at=timezone.now() + lease
    )
    session.status, session.busy_run_id = Session.Status.PREPARING, job
    transaction.on_commit(lambda: enqueue_prepare(session.id, job))
    return job


# How a prepare job is started: set at start-up by runs_app (``runtime.enqueue_prepare``:
# a Celery task in services mode, a thread in embedded mode), which owns the mode.
_dispatch: Callable[[str, str], None] | None = None


def set_dispatcher(dispatch: Callable[[str, str], None]) -> None:
    global _dispatch
    _dispatch = dispatch


def enqueue_prepare(session_id: str, job: str) -> None:
    try:
        if _dispatch is None:
            raise RuntimeError("no prepare dispatcher registered (runs_app is not ready)")
        _dispatch(session_id, job)
    except Exception as exc:  # the broker is away: the clone fails with a sentence
        log.warning("session %s: could not enqueue the clone (%s)", session_id, exc)
        _fail(session_id, job, "The clone could not be started: try again.")


def prepare_and_close(session_id: str, job: str) -> None:
    """``prepare`` on a thread of its own (embedded mode): its connection closed after."""
    try:
        prepare(session_id, job)
    finally:
        connection.close()


def _held(session_id: str, job: str) -> bool:
    close_old_connections()
    return Session.objects.filter(id=session_id, busy_run_id=job).exists()


def prepare(session_id: str, job: str) -> None:
    """The prepare job: clone the session's repository and record it (see the module)."""
    session = Session.objects.filter(id=session_id, busy_run_id=job).first()
    if session is None:
        return  # deleted (cancelled) or taken over: nothing to do
    source = dict(session.source)
    staging = _staging(session)
    try:
        remote = repos.check_url(source["url"])  # again: git goes to the addresses checked now
        secret = _secret_for(session.owner_id, source.get("credential_id"), remote)
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
        commit = _fetch(remote, secret, source, tree_dir, watch)
        count, size = _measure(tree_dir, watch)
        source["commit"] = commit
        ref = f" ({source['ref']})" if source["ref"] else ""
        text = f"Cloned {remote.url}{ref} at {commit[:12]}: {count:,} files, {size:,} bytes."
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
        _fail(session_id, job, failure)


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
) -> str:
    """Clone ``remote`` into ``tree``: the commit checked out."""
    ref, depth = source.get("ref") or "", int(source.get("depth") or 0)
    shallow = [f"--depth={depth}"] if depth else []

    def git(*args: str, cwd: Path) -> repos.Result:
        result = repos.run(
            args, remote=remote, secret=secret, watch=watch, cwd=cwd,
            host_key=source.get("host_key", ""),
        )  # fmt: skip
        if result.host_key:
            source["host_key"] = result.host_key  # pinned for the push
        return result

    if COMMIT.fullmatch(ref):
        tree.mkdir()
        for args in (
            ("init", "-q", "--template=", "."),
            ("remote", "add", "origin", remote.pinned_url),
        ):
            _ok(git(*args, cwd=tree), "The clone")
        _ok(
            git("fetch", "--progress", "--no-tags", *shallow, "origin", ref, cwd=tree),
            "The clone",
        )
        _ok(git("checkout", "--progress", "-q", "--detach", "FETCH_HEAD", cwd=tree), "The clone")
    else:
        branch = ["--branch", ref] if ref else []
        _ok(
            git(
                "clone", "--progress", "--template=", "--no-tags", "--single-branch",
                "--no-recurse-submodules", *shallow, *branch, "--", remote.pinned_url, "tree",
                cwd=tree.parent,
            ),
            "The clone",
        )  # fmt: skip
    # The worktree's repository names its origin as the user gave it (not the pinned address).
    _ok(git("remote", "set-url", "origin", remote.url, cwd=tree), "The clone")
    head = git("rev-parse", "--verify", "HEAD^{commit}", cwd=tree)
    _ok(head, "The clone")
    branch = git("symbolic-ref", "--quiet", "--short", "HEAD", cwd=tree)
    source["branch"] = branch.stdout.strip()[:200] if branch.code == 0 else ""
    return head.stdout.strip()


def _ok(result: repos.Result, what: str) -> None:
    if result.code != 0:
        raise repos.RepoError(repos.failure_sentence(result, what))


def _measure(tree: Path, watch: repos.Watch | None) -> tuple[int, int]:
    """Files and bytes under ``tree`` outside its ``.git`` (links not followed); past
    ``REPO_MAX_FILES`` or the byte limit, ``RepoLimitError``."""
    count = size = 0
    max_bytes = watch.max_bytes if watch else settings.REPO_MAX_BYTES
    for root, dirs, files in os.walk(tree):
        if root == str(tree):
            dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            count += 1
            try:
                size += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
        if settings.REPO_MAX_FILES and count > settings.REPO_MAX_FILES:
            raise repos.RepoLimitError(
                f"The repository has more than {settings.REPO_MAX_FILES:,} files (REPO_MAX_FILES)."
            )
        if max_bytes and size > max_bytes:
            raise repos.RepoLimitError(
                f"The repository is larger than {max_bytes:,} bytes (REPO_MAX_BYTES)."
            )
    return count, size


def _finish(
    session_id: str, job: str | None, tree: Path, source: dict, text: str, *, seed: bool
) -> Session:
    """Move ``tree`` in as the session's worktree and record it as the first history event,
    holding the session row; with ``job``, only while that job still holds the busy lock."""
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
            snap.ensure()
            if seed:
                _seed(snap, worktree / ".git")
            after = snap.track()
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
            locked.head = message
            locked.source = source
            locked.summary = changes_summary(snap, path_start([message]), after)
            release = {"status": Session.Status.IDLE, "busy_run_id": None, "lease_expires_at": None}
            fenced = Session.objects.filter(id=session_id, busy_run_id=job) if job else None
            if fenced is not None and fenced.update(**release) != 1:
                raise repos.RepoCancelled("The session was taken over.")
            for name, value in release.items():
                setattr(locked, name, value)
            locked.save(update_fields=["head", "source", "summary", "updated_at"])
            HistoryEvent.objects.create(
                session=locked,
                kind=kind if kind == "upload" else "clone",
                data={k: v for k, v in source.items() if k != "credential_id"}
                | {"message_id": message.id, "snapshot": after},
            )
        except BaseException:
            # Nothing is recorded: the files go too, and the worktree is empty again.
            shutil.rmtree(worktree, ignore_errors=True)
            worktree.mkdir(parents=True, exist_ok=True)
            raise
        events.publish_on_commit(session_id, events.SESSION_UPDATED, session=session_data(locked))
    return locked


def _seed(snap: snapshots.Snapshots, git_dir: Path) -> None:
    """The snapshot store takes the clone's own objects and index (read while the job still
    holds the session: nothing of the agent's is in them yet), so the first snapshot costs a
    stat walk, not a hash of every file; and its ``shallow`` list, so a push stops there."""
    packs = sorted((git_dir / "objects" / "pack").glob("pack-*.*"))
    index = git_dir / "index"
    seed = getattr(snap, "seed", None)
    if seed is not None and index.is_file():
        seed(index, [p for p in packs if p.suffix in (".pack", ".idx")])
    shallow = git_dir / "shallow"
    if shallow.is_file() and not shallow.is_symlink():
        shutil.copyfile(shallow, snap.git_dir / "shallow")


def _fail(session_id: str, job: str, sentence: str) -> None:
    """The clone did not happen: the session is idle with an empty worktree and
    ``source.error``; only while ``job`` still holds it."""
    with transaction.atomic():
        try:
            locked = lock.lock_session(session_id)
        except NotFoundError:
            return  # deleted meanwhile (a cancel): nothing to record
        if locked.busy_run_id != job:
            return
        shutil.rmtree(locked.worktree, ignore_errors=True)
        locked.worktree.mkdir(parents=True, exist_ok=True)
        locked.source = {**locked.source, "error": sentence[:500]}
        Session.objects.filter(id=session_id, busy_run_id=job).update(
            status=Session.Status.IDLE,
            busy_run_id=None,
            lease_expires_at=None,
            source=locked.source,
            updated_at=timezone.now(),
        )
        locked.refresh_from_db()
        events.publish_on_commit(session_id, events.SESSION_UPDATED, session=session_data(locked))


# -- upload ------------------------------------------------------------------------------------
def fill_from_upload(*, session: Session, name: str, fileobj=None, files=None) -> Session:  # noqa: ANN001
    """Fill a new, empty ``session``'s worktree with an uploaded archive's files (or a
    dropped folder's) and record it as its first history event; refused whole, with the
    session deleted and nothing kept, when ``unpack`` refuses it."""
    staging = _staging(session)
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
        source = {"type": "upload", "name": name[:200], "files": done.files}
        text = f"Uploaded {name or 'a folder'}: {done.files:,} files, {done.bytes:,} bytes."
        return _finish(session.id, None, tree, source, text, seed=False)
    except unpack.ArchiveRefused as exc:
        _drop(session)
        raise InvalidInput(str(exc)) from None
    except BaseException:
        _drop(session)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _drop(session: Session) -> None:
    Session.objects.filter(id=session.id).delete()
    shutil.rmtree(session.worktree, ignore_errors=True)
    shutil.rmtree(session.snapshot_dir, ignore_errors=True)


# -- push --------------------------------------------------------------------------------------
BRANCH = re.compile(
    r"^(?!-)(?!.*\.\.)(?!.*//)(?!.*@\{)(?!.*\.lock$)(?!.*/\.)(?!\.)[A-Za-z0-9._/-]{1,200}(?<![/.])$"
)


def push(*, session: Session, branch: object, credential_id: object, user) -> dict:  # noqa: ANN001
    """Push the session's work at its head to its origin under ``branch`` (see the module):
    ``{remote, branch, commit}``; 409 when the branch exists and would not fast-forward."""
    source = session.source or {}
    if source.get("type") != "git" or not source.get("commit"):
        raise InvalidInput("Only a session started from a git repository can be pushed.")
    if not isinstance(branch, str) or not BRANCH.match(branch):
        raise InvalidInput("branch must be a branch name such as agent/fix-tests.")
    if credential_id is not None and not isinstance(credential_id, str):
        raise InvalidInput("credential_id must be a credential's id.")
    try:
        remote = repos.check_url(source["url"])
    except repos.RepoError as exc:
        raise InvalidInput(str(exc)) from None
    secret = _secret_for(session.owner_id, credential_id or source.get("credential_id"), remote)
    at = downloads.point(session, None)
    path = at.path
    start = next(
        (i + 1 for i, m in enumerate(path) if _is_source(m)), 0
    )  # the turns after the clone
    snap = snapshots.for_session(session)
    base_tree = snap.object_info([source["commit"]])
    if not base_tree or base_tree[0][1] != "commit":
        raise ConflictError("The cloned commit is not in the snapshot store any more.")
    finishes = [p for m in path[:start] for p in m.loaded_parts if p.type == "step-finish"]
    clone_tree = finishes[-1].data["snapshot"] if finishes else _commit_tree(snap, source["commit"])
    tip = downloads.chain(snap, source["commit"], clone_tree, path, start, user.get_username())
    watch = repos.Watch(deadline=time.monotonic() + settings.REPO_CLONE_TIMEOUT)
    with _scratch_dir() as cwd:
        result = repos.run(
            ["push", "--porcelain", "--no-verify", remote.pinned_url, f"{tip}:refs/heads/{branch}"],
            remote=remote,
            secret=secret,
            watch=watch,
            cwd=cwd,
            git_dir=snap.git_dir,
            host_key=source.get("host_key", ""),
        )
    if result.code != 0:
        text = f"{result.stdout}\n{result.stderr}"
        if "[rejected]" in text or "non-fast-forward" in text or "fetch first" in text:
            raise ConflictError(
                f"The branch {branch} exists on the remote and would not fast-forward to this "
                "work: choose a new branch name."
            )
        raise InvalidInput(repos.failure_sentence(result, "The push"))
    HistoryEvent.objects.create(
        session=session,
        kind="push",
        created_by=user,
        data={"remote": remote.url, "branch": branch, "commit": tip},
    )
    return {"remote": remote.url, "branch": branch, "commit": tip}


def _is_source(message: Message) -> bool:
    return any(
        p.type == Part.Type.STEP_START and (p.data or {}).get("source")
        for p in message.loaded_parts
    )


def _commit_tree(snap: snapshots.Snapshots, commit: str) -> str:
    body = snap.read_objects([commit])[commit][1].decode("utf-8", "replace")
    return body.split("\n", 1)[0].removeprefix("tree ").strip()


class _scratch_dir:
    def __enter__(self) -> Path:
        self._dir = tempfile.TemporaryDirectory(prefix="agentplat-push-")
        return Path(self._dir.name)

    def __exit__(self, *exc: object) -> None:
        self._dir.cleanup()
