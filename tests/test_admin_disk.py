"""Issue 43: the admin's Disk page says what the worktrees show and what they take, per user
and overall (a fork's files shared with its source counted once), and how worktrees are
written on this host; superusers only."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from sessions_app.models import Session
from tests.conftest import new_session, run_turn
from workspace import sandbox, shared_checkouts

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_disk_page_counts_a_forks_shared_files_once_for_everyone(api, settings):
    sid = new_session(api)
    run_turn(api, sid, "write big.txt " + "x" * 50_000)
    fork = api.post(f"/api/sessions/{sid}/fork/", {}, format="json")
    assert fork.status_code == 201
    admin_user = User.objects.create_superuser("root-admin", "r@example.com", "pw-long-enough-1")
    client = Client()
    client.force_login(admin_user)
    page = client.get("/admin/disk/")
    assert page.status_code == 200
    overall = page.context["overall"]
    assert overall.sessions == 2 and overall.files == 2
    assert overall.shown == 2 * 50_000
    shared = sandbox.uses_layers(Session.objects.get(id=sid).worktree)
    folders = 2 * 4096  # the two worktrees' own directories (a fork's are its own)
    if shared:
        assert overall.disk < 53_248 + folders + 4096, "the fork's file is the source's"
        assert "copy-on-write" in page.context["workspaces"]
    else:
        assert overall.disk >= 100_000
        assert "full copies" in page.context["workspaces"]
    assert b"files shown" in page.content and b"MiB" in page.content
    assert b'href="/admin/disk/"' in client.get("/admin/").content  # linked beside Usage


def test_the_disk_page_is_for_superusers_only(owner):
    owner.is_staff = True
    owner.save()
    client = Client()
    client.force_login(owner)
    assert client.get("/admin/disk/").status_code == 403
    assert Client().get("/admin/disk/").status_code == 302  # to the admin's login


def test_the_disk_page_counts_what_only_a_shared_checkout_holds(api, settings, tmp_path):
    entry = shared_checkouts.root() / ("a" * 40) / "files"
    entry.mkdir(parents=True)
    (entry / "gone.txt").write_bytes(b"y" * 40_000)  # no worktree links it any more
    admin_user = User.objects.create_superuser("root-admin", "r@example.com", "pw-long-enough-1")
    client = Client()
    client.force_login(admin_user)
    page = client.get("/admin/disk/")
    overall = page.context["overall"]
    assert 40_000 <= overall.kept < 40_000 + 4 * 4096
    assert overall.disk >= overall.kept
    assert b"held only by the checkouts" in page.content


def test_a_web_without_worktrees_points_to_the_hosts_and_walks_nothing(settings, tmp_path):
    """Issue 45: a web process started with WORKSPACE_ROOT="" walks no folder for the Disk
    page and probes none for the health's details; it points to the Hosts page."""
    settings.HOLDS_WORKTREES = False
    settings.WORKSPACE_ROOT = tmp_path / "never-made"
    admin_user = User.objects.create_superuser("root-admin", "r@example.com", "pw-long-enough-1")
    client = Client()
    client.force_login(admin_user)
    page = client.get("/admin/disk/")
    assert page.status_code == 200
    assert b"holds no worktree" in page.content and b"/admin/sessions_app/host/" in page.content
    health = client.get("/api/health/").json()
    assert "worker hosts hold them" in health["details"]["workspaces"]
    assert not settings.WORKSPACE_ROOT.exists()
