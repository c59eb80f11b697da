"""Replicated snapshots (issue 45, step 2): a session's snapshots pushed to one central bare
repository (``SNAPSHOT_REMOTE``, any git server over https or ssh), so that losing a worker
host loses no session's files.

**What the central repository holds.** One ref per session, ``refs/sessions/<id>/head``: a
commit whose tree is the session's snapshot (the worktree as of its last step or history
move), parented on the commit pushed before it (the session's chain of replicated snapshots).
The parent is what makes a push send only what the step changed: git leaves out what the
remote's commit, and so its tree, already holds, walking only the subtrees that differ (with a
commit of no parent it sent the whole tree: 5,052 objects for 10 changed files of 5,000). The
parent is the commit the row says was replicated, when the local store still has it (a prune
past its cutoff may have taken it: that push is then a root commit, sent whole, once). The
commit has a fixed identity and date: the same tree on the same parent is the same commit, so
a push that reached the server but was not recorded is a no-op the next time.

**Only forward.** The update is conditional (``--force-with-lease``) on the commit the session
row says was replicated (``Session.replicated_commit``): a push from a stale worker, one that
lost its lease and went on, built on what the row said before the current owner pushed, is
refused by the server and changes nothing; the row is updated the same way (compare and set).
A refusal seen by the session's owner (its push reached the server, then the row was not
written) is repaired by reading the remote's ref (``remote_tip``) and pushing on it once.

**Where git runs.** In the session's snapshot store (``GIT_DIR`` = its git dir, which shares
the host's object store), through ``repos.run``: the runner for remotes (a URL checked once,
transports but https/ssh off, hooks and credential helpers off, no config but git's own and
the store's, a deadline), never in the worktree or its ``.git``. The URL is the operator's,
so its address may be private (``check_url(trusted=True)``); credentials are the
operator's too: ``SNAPSHOT_REMOTE_TOKEN`` (https, a Basic header in git's environment),
``SNAPSHOT_REMOTE_SSH_KEY`` (a private key file, copied to a 0600 scratch file) and
``SNAPSHOT_REMOTE_KNOWN_HOSTS`` (the server's host key lines: pinned, never trust on first
use); ``GIT_SSL_CAINFO`` is the CA for https.

Off when ``SNAPSHOT_REMOTE`` is empty (embedded mode, one host: the local store is the
store). The session's record of what was replicated, and when, is ``sessions_app.replicas``.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

from django.conf import settings

from . import repos, tree_objects
from .snapshots import Snapshots

IDENT = "agentplat <replication@agentplat.invalid> 0 +0000"


class ReplicationError(Exception):
    """A push that did not happen: ``str(exc)`` says why (scrubbed of any secret)."""


class ReplicationRejected(ReplicationError):
    """The server refused the update: its ref is not the parent this push was built on."""


def enabled() -> bool:
    return bool(settings.SNAPSHOT_REMOTE)


def ref(session_id: str) -> str:
    return f"refs/sessions/{session_id}/head"


def commit(snap: Snapshots, tree: str, parent: str = "") -> str:
    """The commit that wraps ``tree`` on ``parent`` (none when "" or not in the local store):
    the same arguments give the same id (a fixed identity and date)."""
    lines = [f"tree {tree}"]
    if parent and snap.run(["cat-file", "-e", f"{parent}^{{commit}}"]).code == 0:
        lines.append(f"parent {parent}")
    lines += [f"author {IDENT}", f"committer {IDENT}", "", "snapshot"]
    return tree_objects.write_object(snap, "commit", ("\n".join(lines) + "\n").encode())


def push(
    snap: Snapshots, session_id: str, tree: str, expected: str, *, parent: str | None = None
) -> str:
    """Push ``tree`` as the session's ref, if the remote's ref is ``expected`` (the commit
    last replicated, "" for none): the new commit's id. ``ReplicationRejected`` when the
    remote's ref is elsewhere; ``ReplicationError`` for anything else (the server down, a
    deadline passed). ``parent``: the new commit's parent when it is not ``expected`` (an
    import's first push: a chain made locally, on a ref the remote does not have yet)."""
    new = commit(snap, tree, expected if parent is None else parent)
    _push_ref(snap, session_id, expected, new, "The snapshot push")
    return new


def _push_ref(snap: Snapshots, session_id: str, expected: str, source: str, what: str) -> None:
    """The session's ref set to ``source`` ("" deletes it) if the remote's is ``expected``:
    ``ReplicationRejected`` when it is elsewhere, ``ReplicationError`` for anything else."""
    name = ref(session_id)
    result = _git(
        snap,
        ["push", "--porcelain", "--no-verify", f"--force-with-lease={name}:{expected}"],
        f"{source}:{name}",
    )
    if result.code != 0:
        text = f"{result.stdout}\n{result.stderr}"
        sentence = repos.failure_sentence(result, what)
        if "[rejected]" in text or "stale info" in text or "fetch first" in text:
            raise ReplicationRejected(sentence)
        raise ReplicationError(sentence)


def delete(snap: Snapshots, session_id: str, expected: str) -> None:
    """Delete the session's ref in the central store (the session was deleted), if it still
    names ``expected`` (``--force-with-lease``: a ref moved by a push from elsewhere is
    refused, ``ReplicationRejected``, and kept)."""
    _push_ref(snap, session_id, expected, "", "Deleting the snapshot ref")


def remote_tip(snap: Snapshots, session_id: str) -> str:
    """The commit the remote's ref of the session names ("" for none)."""
    result = _git(snap, ["ls-remote"], ref(session_id))
    if result.code != 0:
        raise ReplicationError(repos.failure_sentence(result, "Reading the snapshot store"))
    return result.stdout.split("\t", 1)[0].strip() if result.stdout.strip() else ""


def fetch(snap: Snapshots, session_id: str, *, keep: bool = False) -> None:
    """Bring the session's replicated commit (and its tree's objects) into the local store,
    for re-homing (``sessions_app/rehome.py``); ``ReplicationError`` when it cannot.
    ``keep``: write the ref in the local store too (the web's mirror, ``mirror.py``: its next
    fetch of the session then brings only what is new)."""
    name = ref(session_id)
    refspec = f"+{name}:{name}" if keep else name
    result = _git(snap, ["fetch", "--no-tags", "--no-write-fetch-head"], refspec)
    if result.code != 0:
        raise ReplicationError(repos.failure_sentence(result, "Fetching the snapshot"))


def _git(snap: Snapshots, command: list[str], refspec: str) -> repos.Result:
    """``git <command> <remote> <refspec>`` in the session's snapshot store, by ``repos.run``."""
    try:
        remote = repos.check_url(settings.SNAPSHOT_REMOTE, trusted=True)
    except repos.RepoError as exc:
        raise ReplicationError(f"SNAPSHOT_REMOTE: {exc}") from None
    watch = repos.Watch(deadline=time.monotonic() + settings.SNAPSHOT_REMOTE_TIMEOUT)
    with tempfile.TemporaryDirectory(prefix="agentplat-replica-") as cwd:
        try:
            return repos.run(
                [*command, remote.pinned_url, refspec],
                remote=remote,
                secret=_secret(),
                watch=watch,
                cwd=Path(cwd),
                git_dir=snap.git_dir,
                host_key=_known_hosts(),
            )
        except repos.RepoError as exc:
            raise ReplicationError(f"The snapshot store: {exc}") from None


def _secret() -> repos.Secret | None:
    if settings.SNAPSHOT_REMOTE_TOKEN:
        return repos.Secret("token", settings.SNAPSHOT_REMOTE_TOKEN)
    if settings.SNAPSHOT_REMOTE_SSH_KEY:
        try:
            return repos.Secret("ssh_key", Path(settings.SNAPSHOT_REMOTE_SSH_KEY).read_text())
        except OSError as exc:
            raise ReplicationError(f"SNAPSHOT_REMOTE_SSH_KEY: {exc.strerror}") from None
    return None


def _known_hosts() -> str:
    """The pinned host keys of an ssh store ("" for https, or when none is set: then ssh
    accepts the first key it meets, for this push only)."""
    if not settings.SNAPSHOT_REMOTE_KNOWN_HOSTS:
        return ""
    with contextlib.suppress(OSError):
        return Path(settings.SNAPSHOT_REMOTE_KNOWN_HOSTS).read_text()
    raise ReplicationError("SNAPSHOT_REMOTE_KNOWN_HOSTS cannot be read.")
