"""The checks of a repository request, before anything is stored or sent (docs/semantics.md §13):
the repository a session is cloned from (its URL and host, ref, depth and credential), and a
push's branch and remote."""

from __future__ import annotations

import re

from core.errors import InvalidInput
from workspace import repos

from ..models import Session
from .credentials import secret_for

REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/+-]{0,199}$")
DEPTH_MAX = 1_000_000
BRANCH = re.compile(
    r"^(?!-)(?!.*\.\.)(?!.*//)(?!.*@\{)(?!.*\.lock$)(?!.*/\.)(?!\.)[A-Za-z0-9._/-]{1,200}(?<![/.])$"
)


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
    secret_for(owner.pk, credential_id, remote)  # refused now, not in the job
    source = {"type": "git", "url": remote.url, "ref": ref, "depth": depth, "commit": None}
    if credential_id:
        source["credential_id"] = credential_id
    return source


def check_push(session: Session, branch: object, credential_id: object) -> repos.Remote:
    """The session's origin, once the push is known to make sense: the session was cloned
    from a git repository, ``branch`` is a branch name, ``credential_id`` a credential's id
    (or none), and the origin's URL still passes ``repos.check_url``."""
    source = session.source or {}
    if source.get("type") in ("share", "admin"):
        raise InvalidInput(
            "This session is a copy of another user's session: the repository it came from "
            "stays with them, so it cannot be pushed. Download its files or changes instead."
        )
    if source.get("type") != "git" or not source.get("commit"):
        raise InvalidInput("Only a session started from a git repository can be pushed.")
    if not isinstance(branch, str) or not BRANCH.match(branch):
        raise InvalidInput("branch must be a branch name such as agent/fix-tests.")
    if credential_id is not None and not isinstance(credential_id, str):
        raise InvalidInput("credential_id must be a credential's id.")
    try:
        return repos.check_url(source["url"])
    except repos.RepoError as exc:
        raise InvalidInput(str(exc)) from None
