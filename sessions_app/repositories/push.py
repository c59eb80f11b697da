"""Real code out (docs/semantics.md §13.2): a push of a session's work. One commit per user turn on
top of the cloned commit, built from the snapshots in the session's own snapshot store (never the
worktree's ``.git``, which the agent may have changed), pushed to the session's origin
(``source.url``, never a remote the worktree names) under the branch the user names: never
forced."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from django.conf import settings

from core.errors import ConflictError, InvalidInput
from workspace import repos, snapshots, store

from .. import host_calls
from ..models import HistoryEvent, Message, Part, Session
from ..services import downloads
from .checks import check_push
from .credentials import secret_for


def push(*, session: Session, branch: object, credential_id: object, user) -> dict:  # noqa: ANN001
    """``push_here``, on the session's home host when this process holds no worktree (issue
    45: the cloned commit and its objects are in the home host's snapshot store)."""
    return host_calls.call_json(
        "push", session=session, branch=branch, credential_id=credential_id, user=user
    )


def push_here(*, session: Session, branch: object, credential_id: object, user) -> dict:  # noqa: ANN001
    """Push the session's work at its head to its origin under ``branch`` (see the module):
    ``{remote, branch, commit}``; 409 when the branch exists and would not fast-forward."""
    remote = check_push(session, branch, credential_id)
    source = session.source
    secret = secret_for(session.owner_id, credential_id or source.get("credential_id"), remote)
    at = downloads.point(session, None)
    path = at.path
    start = next(
        (i + 1 for i, m in enumerate(path) if _is_source(m)), 0
    )  # the turns after the clone
    snap = snapshots.for_session(session)
    base_tree = store.object_info(snap, [source["commit"]])
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
    body = store.read_objects(snap, [commit])[commit][1].decode("utf-8", "replace")
    return body.split("\n", 1)[0].removeprefix("tree ").strip()


class _scratch_dir:
    def __enter__(self) -> Path:
        self._dir = tempfile.TemporaryDirectory(prefix="agentplat-push-")
        return Path(self._dir.name)

    def __exit__(self, *exc: object) -> None:
        self._dir.cleanup()


# On the allow-list of calls on a home host (sessions_app/tasks.py imports this module there).
host_calls.register("push", push_here, frozenset({"branch", "credential_id"}))
