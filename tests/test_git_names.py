"""Issue 12.3: names git refuses (``.GIT/config``, ``.git.``, ``GIT~1`` …) are refused by the
tools, and a session whose worktree holds one anyway (a shell made it) keeps working."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from runs_app.tools import TOOLS, ToolContext, ToolError
from sessions_app.models import Session
from tests.conftest import run_turn
from tests.support.planting import planted
from workspace import skipped_files, snapshots
from workspace.git_names import git_refuses

# Every form of .git that git's verify_path refuses, with NTFS and HFS+ protection on.
PROTECTED = [
    ".git",
    ".GIT",
    ".Git",
    ".gIT",
    ".git.",
    ".GIT..",
    ".git ",
    ".git. .",
    "git~1",
    "GIT~1",
    "Git~1.",
    "git~1 ",
    ".git::$INDEX_ALLOCATION",
    ".git:stream",
    "GIT~1:x",
    ".git\\config",
    "x\\.GIT",
    ".g\u200cit",
    ".\u200dgit",
    "\ufeff.git",
    ".GI\u200et",
    ".gi\u202at",
    ".git\u206f",
]
ALLOWED = [".gitignore", ".gitattributes", "git~2", "a.git", ".git.x", "gitx", ".gi", "git"]


@pytest.fixture
def ctx(tmp_path):
    worktree = tmp_path / "wt"
    worktree.mkdir()
    return ToolContext(worktree=worktree, should_abort=lambda: False)


def git_accepts(tmp_path, name: str) -> bool:
    """Ask git itself: may ``name`` go into an index?"""
    repo = tmp_path / "probe.git"
    if not repo.exists():
        subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    proc = subprocess.run(
        ["git", "update-index", "--add", "--cacheinfo", f"100644,{'e' * 40},{name}"],
        env={"GIT_DIR": str(repo), "GIT_INDEX_FILE": str(tmp_path / "probe.index")},
        capture_output=True,
    )
    return proc.returncode == 0


@pytest.mark.parametrize("name", PROTECTED)
@pytest.mark.parametrize("where", ["{}", "{}/config", "sub/{}/x"])
@pytest.mark.parametrize("tool", ["write", "append"])
def test_every_form_of_git_is_refused_as_a_tool_error(ctx, name, where, tool):
    path = where.format(name)
    with pytest.raises(ToolError, match="git refuses|inside .git"):
        TOOLS[tool].run(ctx, {"path": path, "content": "[core]"})
    assert list(ctx.worktree.iterdir()) == []


@pytest.mark.parametrize("name", ALLOWED)
def test_names_git_accepts_are_written(ctx, name, tmp_path):
    TOOLS["write"].run(ctx, {"path": f"d/{name}", "content": "x"})
    assert (ctx.worktree / "d" / name).read_text() == "x"
    assert git_accepts(tmp_path, f"d/{name}")


@pytest.mark.parametrize("name", PROTECTED)
def test_the_list_agrees_with_git(name, tmp_path):
    """Each name of the list is refused by our check; git on this machine refuses every one
    of them but the HFS+ forms (git protects HFS+ only on macOS; we always do)."""
    assert git_refuses(name) and git_refuses(f"a/{name}/b")
    hfs_only = any(ord(c) > 127 for c in name)
    assert git_accepts(tmp_path, f"{name}/x") == hfs_only


@hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=".gitGIT~1 :\\/a\u200c", min_size=1, max_size=9))
def test_whatever_git_refuses_we_refuse(tmp_path_factory, name):
    tmp = tmp_path_factory.mktemp("probe")
    if not git_accepts(tmp, name):
        assert git_refuses(name), name


@pytest.mark.django_db(transaction=True)
def test_a_session_with_such_a_file_keeps_working(api):
    """A .GIT/config made behind the tools' back (a shell) once failed every later snapshot:
    runs, diff and revert answered 500 until the session was deleted."""
    sid = api.post("/api/sessions/", {}, format="json").json()["id"]
    run_turn(api, sid, "write a.txt one")
    worktree = Session.objects.get(id=sid).worktree
    for name in (".GIT/config", "git~1/x", ".git./y"):
        (worktree / name).parent.mkdir(exist_ok=True)
        (worktree / name).write_text("[core]\n\tworktree = /\n")
    planted(worktree)
    run_turn(api, sid, "write a.txt two\nwrite b.txt new")
    diff = api.get(f"/api/sessions/{sid}/diff/")
    assert diff.status_code == 200
    assert {d["file"] for d in diff.json()} == {"a.txt", "b.txt"}
    # Reported as left out where the whole worktree is listed (the revert's preview, the
    # downloads); a step lists what it left out beneath its own paths, and no step made these.
    listed = skipped_files.skipped(snapshots.for_session(Session.objects.get(id=sid)))
    assert {s["path"] for s in listed} >= {".GIT/config", "git~1/x", ".git./y"}
    second = [
        m
        for m in api.get(f"/api/sessions/{sid}/messages/").json()["results"]
        if m["role"] == "user"
    ][1]
    reverted = api.post(f"/api/sessions/{sid}/revert/", {"message_id": second["id"]}, format="json")
    assert reverted.status_code == 200, reverted.json()
    assert (worktree / "a.txt").read_text() == "one" and not (worktree / "b.txt").exists()
    assert (worktree / ".GIT/config").exists(), "revert leaves what it never recorded"
    assert api.post(f"/api/sessions/{sid}/unrevert/").status_code == 200
    assert (worktree / "b.txt").read_text() == "new"
    assert snapshots.for_session(Session.objects.get(id=sid)).track()
