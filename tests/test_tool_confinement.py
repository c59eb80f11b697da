"""Tool confinement (issue 7), property-based: whatever path the model sends — ``..``,
absolute, ``~``, through symlinks that lead out, unicode, very long — no file tool reads or
writes anything outside the session worktree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from runs_app.tools import TOOLS, ToolContext

SECRET = "top-secret-outside-the-worktree"
SEGMENTS = [
    "..",
    ".",
    "",
    "~",
    "a.txt",
    "sub",
    "link_out",
    "link_file",
    "abs_link",
    "inner",
    "ü名🙂",
    "x" * 300,
    ".git",
    "outside",
    "secret.txt",
    "%2e%2e",
    "..\\..",
    " ",
]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    root = tmp_path_factory.mktemp("confine")
    outside = root / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    wt = root / "wt"
    (wt / "sub").mkdir(parents=True)
    (wt / "a.txt").write_text("inside")
    os.symlink("../outside", wt / "link_out")
    os.symlink("../outside/secret.txt", wt / "link_file")
    os.symlink(str(outside), wt / "abs_link")
    os.symlink("sub", wt / "inner")
    return root, wt


def outside_state(root: Path, wt: Path) -> dict[str, tuple]:
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == wt or wt in Path(dirpath).parents:
            dirnames[:] = []
            continue
        # The server's own record beside the worktrees (``workspace/change_journal.py``):
        # the paths a write changed and the worktree's size, no path the agent named.
        dirnames[:] = [d for d in dirnames if d != ".journals"]
        for name in filenames + dirnames:
            p = Path(dirpath) / name
            if p == wt:
                continue
            st_ = p.lstat()
            state[str(p)] = (st_.st_size, st_.st_mtime_ns, p.read_bytes() if p.is_file() else b"")
    return state


paths = st.one_of(
    st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=6).map("/".join),
    st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=4).map(lambda s: "/" + "/".join(s)),
    st.text(min_size=0, max_size=80),
)


@hsettings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(tool=st.sampled_from(["read", "list", "write", "append", "delete"]), path=paths)
def test_no_file_tool_leaves_the_worktree(sandbox, tool, path):
    root, wt = sandbox
    before = outside_state(root, wt)
    ctx = ToolContext(worktree=wt, should_abort=lambda: False)
    args = {"path": path}
    if tool in ("write", "append"):
        args["content"] = "written"
    try:
        output = TOOLS[tool].run(ctx, args)
    except Exception:  # noqa: BLE001 - refusing (ToolError) or failing is fine; leaking is not
        output = ""
    assert SECRET not in output, (tool, path)
    assert outside_state(root, wt) == before, (tool, path)
    # The worktree's own links still point where they did (nothing replaced them with files
    # that were then followed out).
    assert os.readlink(wt / "link_out") == "../outside"
