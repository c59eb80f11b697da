from __future__ import annotations

import os

import pytest

from runs_app.tools import TOOLS, ToolContext, ToolError


@pytest.fixture
def ctx(tmp_path):
    worktree = tmp_path / "wt"
    worktree.mkdir()
    return ToolContext(worktree=worktree, should_abort=lambda: False)


def run(ctx, name, **args):
    return TOOLS[name].run(ctx, args)


def test_write_sets_exact_content_and_append_adds_a_line(ctx):
    run(ctx, "write", path="notes/a.txt", content="first line")
    assert (ctx.worktree / "notes/a.txt").read_bytes() == b"first line"
    run(ctx, "append", path="notes/a.txt", content="second")
    assert (ctx.worktree / "notes/a.txt").read_text() == "first linesecond\n"
    assert run(ctx, "read", path="notes/a.txt") == "first linesecond\n"
    assert run(ctx, "list") == "notes/"
    run(ctx, "delete", path="notes/a.txt")
    assert not (ctx.worktree / "notes/a.txt").exists()


@pytest.mark.parametrize("path", ["../../etc/x", "/etc/x", "a/../../x", "~/x"])
def test_it_refuses_paths_that_escape(ctx, path, tmp_path):
    with pytest.raises(ToolError, match="escapes the worktree"):
        run(ctx, "write", path=path, content="y")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wt"]


def test_it_refuses_a_symlink_that_leads_outside(ctx, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("keep")
    os.symlink(outside, ctx.worktree / "link")
    os.symlink(outside / "secret", ctx.worktree / "file-link")
    for name, args in [
        ("write", {"path": "link/secret", "content": "changed"}),
        ("write", {"path": "file-link", "content": "changed"}),
        ("append", {"path": "file-link", "content": "changed"}),
        ("read", {"path": "link/secret"}),
        ("delete", {"path": "link/secret"}),
        ("list", {"path": "link"}),
    ]:
        with pytest.raises(ToolError, match="symlink"):
            run(ctx, name, **args)
    assert (outside / "secret").read_text() == "keep"


def test_side_effect_policies():
    assert {n for n, t in TOOLS.items() if not t.side_effects} == {"read", "list", "wait"}
    assert all(t.side_effects for n, t in TOOLS.items() if n in {"write", "append", "delete"})


def test_shell_is_refused_unless_enabled(ctx, settings):
    settings.AGENT_ALLOW_SHELL = False
    with pytest.raises(ToolError, match="disabled"):
        run(ctx, "shell", command="echo hi")
    settings.AGENT_ALLOW_SHELL = True
    assert run(ctx, "shell", command="echo hi > f; cat f") == "hi\n"


def test_wait_stops_when_aborted(ctx):
    aborting = ToolContext(worktree=ctx.worktree, should_abort=lambda: True)
    with pytest.raises(ToolError, match="Aborted"):
        TOOLS["wait"].run(aborting, {"seconds": 30})
