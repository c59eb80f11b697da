"""A clone's bounds hold before its files are written (issue 42, finding 1): the commit's tree
is measured (``workspace/repo_tree.py``) between the fetch and the checkout, so a small pack
that names a large tree is refused having written nothing but the pack."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sessions_app.models import Session
from sessions_app.repositories import fill
from workspace import repo_tree, repos

from .conftest import run_turn, wait_until
from .support.git_server import (  # noqa: F401
    GitServer,
    git_server_fixture,
    reachable_server_fixture,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _worktree_bytes(root: Path) -> int:
    """Bytes of the files under ``root`` outside any ``.git``."""
    total = 0
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        total += sum(os.lstat(os.path.join(directory, f)).st_size for f in files)
    return total


@pytest.fixture
def peak(monkeypatch, settings) -> dict:
    """The most bytes of checked-out files the staging directory held after any git call."""
    seen = {"bytes": 0, "calls": []}
    original = repos.run

    def spy(args, **kwargs):  # noqa: ANN001, ANN202
        try:
            return original(args, **kwargs)
        finally:
            seen["calls"].append(args[0])
            staging = Path(settings.WORKSPACE_ROOT) / fill.STAGING
            if staging.exists():
                seen["bytes"] = max(seen["bytes"], _worktree_bytes(staging))

    monkeypatch.setattr(repos, "run", spy)
    return seen


def _clone(api, url: str) -> dict:  # noqa: ANN001
    answer = api.post("/api/sessions/", {"repository": {"url": url}}, format="json")
    assert answer.status_code == 201, answer.json()
    sid = answer.json()["id"]
    wait_until(lambda: Session.objects.get(id=sid).status == "idle", timeout=60)
    return api.get(f"/api/sessions/{sid}/").json()


def test_a_small_pack_naming_a_large_tree_is_refused_having_written_nothing(
    api, server, settings, peak
):
    # One blob of a repeated line (it compresses to almost nothing) at ten paths: the pack is
    # a few KB, the checkout would be ten times the blob.
    blob = b"the same line again\n" * 40_000  # 800,000 bytes
    url = server.make_repo("bomb", {f"copy-{i}.txt": blob for i in range(10)})
    settings.REPO_MAX_BYTES = 2_000_000
    session = _clone(api, url)
    assert "REPO_MAX_BYTES" in session["source"]["error"], session["source"]
    assert peak["bytes"] == 0, f"{peak['bytes']:,} bytes checked out before the refusal"
    assert "checkout" not in peak["calls"]
    worktree = Session.objects.get(id=session["id"]).worktree
    assert list(worktree.iterdir()) == []
    run_turn(api, session["id"], "write a.txt 1")  # usable: idle, an empty worktree


def test_directories_count_as_entries_before_the_checkout(api, server, settings, peak):
    files = {f"d{i}/e{i}/f.txt": "x\n" for i in range(20)}  # 20 files, 40 directories
    url = server.make_repo("wide", files)
    settings.WORKTREE_MAX_ENTRIES = 50
    session = _clone(api, url)
    assert "WORKTREE_MAX_ENTRIES" in session["source"]["error"], session["source"]
    assert peak["bytes"] == 0


def test_a_tree_within_the_bounds_is_cloned_byte_for_byte_whatever_its_attributes(
    api, server, settings
):
    # ``eol=crlf`` would double a file of short lines on checkout, and a working-tree
    # encoding would quadruple it: the checkout writes each blob as it is, so the size
    # measured is the size written.
    lines = b"a\n" * 1000
    files = {".gitattributes": b"* text eol=crlf\nwide.txt working-tree-encoding=UTF-32\n"}
    url = server.make_repo("attrs", {**files, "lines.txt": lines, "wide.txt": lines})
    settings.REPO_MAX_BYTES = 5_000
    session = _clone(api, url)
    assert "error" not in session["source"], session["source"]
    worktree = Session.objects.get(id=session["id"]).worktree
    assert (worktree / "lines.txt").read_bytes() == lines
    assert (worktree / "wide.txt").read_bytes() == lines
    assert not (worktree / ".git" / "info" / "attributes").exists()
    assert session["source"]["branch"] == "main"


def test_the_tree_count_stops_at_the_first_record_past_a_bound():
    count = repo_tree.TreeCount(max_bytes=100)
    record = b"100644 blob " + b"a" * 40 + b"      60\tx\0"
    count.feed(record)
    with pytest.raises(repo_tree.TreeTooLarge, match="larger than 100 bytes"):
        count.feed(record[:20])
        count.feed(record[20:])
    entries = repo_tree.TreeCount(max_entries=3)
    tree = b"040000 tree " + b"b" * 40 + b"       -\td\0"
    with pytest.raises(repo_tree.TreeTooLarge, match="WORKTREE_MAX_ENTRIES"):
        entries.feed(tree * 4)
