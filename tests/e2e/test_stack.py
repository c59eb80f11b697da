"""End to end through the real processes: Daphne + Celery + PostgreSQL + Redis (services
mode), and Daphne alone with SQLite and in-process runs (embedded mode)."""

from __future__ import annotations

import os

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from .flow import run_the_flow
from .stack import base_env, manage, services_database_url

pytestmark = pytest.mark.timeout(240)


@pytest.mark.django_db(transaction=True)
def test_services_mode_runs_through_daphne_and_a_celery_worker(procs, tmp_path):
    url = services_database_url()
    workspace = tmp_path / "ws"
    env = base_env(DATABASE_URL=url, REDIS_URL=settings.REDIS_URL, WORKSPACE_ROOT=str(workspace))
    alice = User.objects.create_user("alice", password="pw")
    bob = User.objects.create_user("bob", password="pw")
    token, outsider = Token.objects.create(user=alice), Token.objects.create(user=bob)
    host = procs.daphne(env, tmp_path)
    procs.worker(env, tmp_path)
    try:
        run_the_flow(host, token.key, outsider.key, workspace)
    except Exception:
        print(procs.logs())
        raise


def test_embedded_mode_runs_in_process_with_sqlite(procs, tmp_path):
    workspace = tmp_path / "ws"
    env = base_env(
        DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3",
        REDIS_URL=None,
        WORKSPACE_ROOT=str(workspace),
    )
    manage(env, "migrate", "-v0")
    manage(env, "ensure_demo_user", "--username", "alice", "--password", "pw")
    manage(env, "ensure_demo_user", "--username", "bob", "--password", "pw")
    host = procs.daphne(env, tmp_path)
    import httpx

    tokens = [
        httpx.post(
            f"http://{host}/api/auth/token/", json={"username": name, "password": "pw"}
        ).json()["token"]
        for name in ("alice", "bob")
    ]
    try:
        run_the_flow(host, tokens[0], tokens[1], workspace)
    except Exception:
        print(procs.logs())
        raise
    assert "REDIS_URL" not in env and os.path.exists(tmp_path / "db.sqlite3")
