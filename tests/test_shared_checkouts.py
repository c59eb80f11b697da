"""Issue 43, design point 3: sessions cloned from the same commit share the files of one
checkout by hard link (``workspace/shared_checkouts.py``), whoever owns them; a change in
one never reaches another, nor the next clone; where commands write into the worktree (no
overlay) nothing is shared. Real git server, real bubblewrap and overlayfs."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from sessions_app.models import Session
from workspace import sandbox, shared_checkouts

from .conftest import run_turn, wait_until
from .support.git_server import (  # noqa: F401
    GitServer,
    git_server_fixture,
    reachable_server_fixture,
)
from .support.shell import shell_on

pytestmark = pytest.mark.django_db(transaction=True)

FILES = {
    "README.md": "# shared\n",
    "src/app.py": "print('hello')\n" * 50,
    "src/pkg/data.txt": "data\n" * 100,
    "run.sh": "#!/bin/sh\necho run\n",
}


def _clone(api, url: str) -> Session:  # noqa: ANN001
    answer = api.post("/api/sessions/", {"repository": {"url": url}}, format="json")
    assert answer.status_code == 201, answer.json()
    sid = answer.json()["id"]
    wait_until(lambda: Session.objects.get(id=sid).status == "idle", timeout=60)
    session = Session.objects.get(id=sid)
    assert "error" not in session.source, session.source
    return session


def _files(root: Path) -> dict[str, tuple[int, bytes]]:
    """Each regular file outside ``.git``: (inode, content)."""
    found = {}
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            path = Path(directory, name)
            if not path.is_symlink():
                found[str(path.relative_to(root))] = (path.lstat().st_ino, path.read_bytes())
    return found


def _git_status(worktree: Path) -> str:
    return subprocess.run(
        ["git", "-c", f"safe.directory={worktree}", "status", "--porcelain"],
        cwd=worktree, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


@pytest.fixture
def repo_url(server) -> str:  # noqa: F811
    return server.make_repo("shared", FILES)


def test_a_second_clone_of_a_commit_links_the_first_ones_files(
    api, outsider_api, repo_url, settings
):
    shell_on(settings)
    first = _clone(api, repo_url)
    if not sandbox.uses_layers(first.worktree):
        pytest.skip("no overlay on this host: clones do not share (tested below)")
    second = _clone(outsider_api, repo_url)  # another user
    mine, theirs = _files(first.worktree), _files(second.worktree)
    assert mine == theirs, "the same inodes, the same bytes"
    assert len(list(shared_checkouts.root().iterdir())) == 1
    assert _git_status(second.worktree) == "", "its repository sees a clean checkout"
    start = second.head.parts.get(type="step-start").data["snapshot"]
    assert start == first.head.parts.get(type="step-start").data["snapshot"]


def test_a_change_in_one_clone_reaches_neither_the_other_nor_the_next(
    api, outsider_api, repo_url, settings
):
    shell_on(settings)
    first = _clone(api, repo_url)
    if not sandbox.uses_layers(first.worktree):
        pytest.skip("no overlay on this host")
    second = _clone(outsider_api, repo_url)
    before = _files(second.worktree)
    run_turn(api, str(first.id), "shell echo more >> README.md && sed -i s/hello/bye/ src/app.py")
    run_turn(api, str(first.id), "write src/pkg/data.txt rewritten")
    assert (first.worktree / "README.md").read_text() == "# shared\nmore\n"
    assert _files(second.worktree) == before, "the other clone: same inodes, same bytes"
    third = _clone(api, repo_url)
    now = _files(third.worktree)
    assert {k: v[1] for k, v in now.items()} == {k: v[1] for k, v in before.items()}
    assert now == before, "the next clone links the kept (unchanged) files"
    run_turn(outsider_api, str(second.id), "shell rm -r src && echo new > README.md")
    assert _files(third.worktree) == before


def test_without_an_overlay_nothing_is_shared(api, outsider_api, repo_url, settings):
    shell_on(settings)
    settings.AGENT_SHELL_OVERLAY = "off"
    first = _clone(api, repo_url)
    second = _clone(outsider_api, repo_url)
    mine, theirs = _files(first.worktree), _files(second.worktree)
    assert {k: v[1] for k, v in mine.items()} == {k: v[1] for k, v in theirs.items()}
    assert not {v[0] for v in mine.values()} & {v[0] for v in theirs.values()}
    assert not shared_checkouts.root().exists()


def test_a_link_that_fails_leaves_a_whole_checkout(
    api, outsider_api, repo_url, settings, monkeypatch
):
    shell_on(settings)
    first = _clone(api, repo_url)
    if not sandbox.uses_layers(first.worktree):
        pytest.skip("no overlay on this host")
    real_link = os.link

    def link(source, target, **kwargs):  # noqa: ANN001, ANN202
        if str(target).endswith("data.txt"):
            raise OSError(31, "Too many links")
        return real_link(source, target, **kwargs)

    monkeypatch.setattr(shared_checkouts.os, "link", link)
    second = _clone(outsider_api, repo_url)
    theirs = _files(second.worktree)
    mine = _files(first.worktree)
    assert {k: v[1] for k, v in theirs.items()} == {k: v[1] for k, v in mine.items()}
    assert not {v[0] for v in mine.values()} & {v[0] for v in theirs.values()}
    assert _git_status(second.worktree) == ""


def test_the_sweep_drops_an_unused_checkout_and_a_clone_after_it_checks_out(
    api, outsider_api, repo_url, settings
):
    shell_on(settings)
    first = _clone(api, repo_url)
    if not sandbox.uses_layers(first.worktree):
        pytest.skip("no overlay on this host")
    assert shared_checkouts.sweep() == []  # used just now
    later = time.time() + settings.SHARED_CHECKOUT_KEEP_DAYS * 86400 + 60
    assert len(shared_checkouts.sweep(later)) == 1
    assert list(shared_checkouts.root().iterdir()) == []
    assert (first.worktree / "src/app.py").is_file(), "the session's files stay"
    second = _clone(outsider_api, repo_url)
    assert _files(second.worktree).keys() == _files(first.worktree).keys()


def test_no_sharing_when_turned_off(api, outsider_api, repo_url, settings):
    shell_on(settings)
    settings.SHARED_CHECKOUT_KEEP_DAYS = 0
    first = _clone(api, repo_url)
    second = _clone(outsider_api, repo_url)
    mine, theirs = _files(first.worktree), _files(second.worktree)
    assert not {v[0] for v in mine.values()} & {v[0] for v in theirs.values()}
