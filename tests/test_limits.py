"""Issue 12.6: bytes per file and per worktree (a tool error past them), sessions per user
(429 QuotaExceeded). A file once grew to 90 MB in a minute of ``append``."""

from __future__ import annotations

import pytest
from django.test import Client

from runs_app.tools import TOOLS, ToolContext, ToolError
from sessions_app.models import Session
from tests.conftest import client_for, run_turn
from workspace.worktree_usage import worktree_bytes


@pytest.fixture
def ctx(tmp_path):
    worktree = tmp_path / "wt"
    worktree.mkdir()
    return ToolContext(worktree=worktree, should_abort=lambda: False)


def test_a_file_cannot_grow_past_its_limit(ctx, settings):
    settings.WORKTREE_MAX_FILE_BYTES = 100
    TOOLS["write"].run(ctx, {"path": "a.txt", "content": "x" * 100})
    with pytest.raises(ToolError, match="at most 100 bytes"):
        TOOLS["write"].run(ctx, {"path": "b.txt", "content": "x" * 101})
    assert not (ctx.worktree / "b.txt").exists()
    TOOLS["write"].run(ctx, {"path": "c.txt", "content": "x" * 90})
    for _ in range(4):
        TOOLS["append"].run(ctx, {"path": "c.txt", "content": "y"})
    with pytest.raises(ToolError, match="at most 100 bytes"):
        for _ in range(10):
            TOOLS["append"].run(ctx, {"path": "c.txt", "content": "y"})
    assert (ctx.worktree / "c.txt").stat().st_size <= 100


def test_the_worktree_cannot_grow_past_its_limit(ctx, settings):
    settings.WORKTREE_MAX_BYTES = 1000
    for i in range(9):
        TOOLS["write"].run(ctx, {"path": f"d/{i}.txt", "content": "x" * 100})
    with pytest.raises(ToolError, match="at most 1,000"):
        TOOLS["write"].run(ctx, {"path": "e.txt", "content": "x" * 101})
    # Rewriting a file counts what it replaces: the same size again fits.
    TOOLS["write"].run(ctx, {"path": "d/0.txt", "content": "z" * 100})
    TOOLS["delete"].run(ctx, {"path": "d/1.txt"})
    TOOLS["write"].run(ctx, {"path": "e.txt", "content": "x" * 200})
    assert worktree_bytes(ctx.worktree) == 1000


@pytest.mark.django_db(transaction=True)
def test_a_run_past_the_limit_ends_its_tool_in_error_and_goes_on(api, settings):
    settings.WORKTREE_MAX_FILE_BYTES = 20
    sid = api.post("/api/sessions/", {}, format="json").json()["id"]
    run_turn(api, sid, f"write big.txt {'x' * 50}\nwrite small.txt ok")
    parts = [
        p
        for m in api.get(f"/api/sessions/{sid}/messages/").json()["results"]
        for p in m["parts"]
        if p["type"] == "tool"
    ]
    assert [p["state"]["status"] for p in parts] == ["error", "completed"]
    assert "at most 20 bytes" in parts[0]["state"]["error"]
    worktree = Session.objects.get(id=sid).worktree
    assert not (worktree / "big.txt").exists() and (worktree / "small.txt").exists()


@pytest.mark.django_db(transaction=True)
def test_sessions_per_user_are_limited_everywhere_one_is_made(api, owner, outsider, settings):
    settings.SESSIONS_PER_USER_MAX = 2
    first = api.post("/api/sessions/", {}, format="json").json()["id"]
    run_turn(api, first, "say hi")
    api.post("/api/sessions/", {}, format="json")
    refused = [
        api.post("/api/sessions/", {}, format="json"),
        api.post(f"/api/sessions/{first}/fork/", {}, format="json"),
    ]
    token = api.post(f"/api/sessions/{first}/share/").json()["token"]
    viewer = client_for(outsider)
    assert viewer.post(f"/api/shared/{token}/fork/").status_code == 201
    viewer.post("/api/sessions/", {}, format="json")
    refused.append(viewer.post(f"/api/shared/{token}/fork/"))
    for response in refused:
        assert response.status_code == 429
        error = response.json()["error"]
        assert error["type"] == "QuotaExceeded" and "2 sessions" in error["message"]
    assert Session.objects.filter(owner=owner).count() == 2
    assert Session.objects.filter(owner=outsider).count() == 2
    page = Client()
    page.force_login(owner)
    response = page.post("/sessions/new/", {"title": "one more"})
    assert response.status_code == 429 and b"2 sessions" in response.content
