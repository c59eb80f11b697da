"""Services mode takes its PostgreSQL connections from Django's pool (``DB_POOL_MAX_SIZE``):
requests to Daphne reuse a few connections instead of opening one each (a new PostgreSQL
backend: fork, authentication, caches; about 9 ms of CPU a run started through the API).

On the code before the pool, the 30 requests below opened 30 sessions on the database."""

from __future__ import annotations

import time

import httpx
import psycopg
import pytest

from config.databases import database_from_url

pytestmark = pytest.mark.timeout(120)


def _sessions(admin_url: str, db_name: str) -> int:
    time.sleep(1.2)  # PostgreSQL's statistics are flushed about once a second
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT sessions FROM pg_stat_database WHERE datname = %s", [db_name]
        ).fetchone()
    return int(row[0])


def test_requests_reuse_pooled_connections(server):
    if not hasattr(server, "db_name"):
        pytest.skip("services mode only (PostgreSQL)")
    # A token is looked up in the database on every request (this one is nobody's: 401).
    headers = {"Authorization": "Token " + "0" * 40}
    with httpx.Client(base_url=server.url, timeout=30, headers=headers) as http:
        assert http.get("/api/sessions/").status_code == 401  # the pool is open
        before = _sessions(server.admin_url, server.db_name)
        for _ in range(30):
            assert http.get("/api/sessions/").status_code == 401
        opened = _sessions(server.admin_url, server.db_name) - before
    assert opened <= 5, f"{opened} new database sessions for 30 requests"


def test_the_pool_is_configured_and_can_be_turned_off(monkeypatch):
    url = "postgres://u@127.0.0.1:5432/db"
    monkeypatch.setenv("DB_POOL_MAX_SIZE", "7")
    pooled = database_from_url(url)
    assert pooled["OPTIONS"]["pool"]["max_size"] == 7 and pooled["CONN_HEALTH_CHECKS"]
    monkeypatch.setenv("DB_POOL_MAX_SIZE", "0")
    plain = database_from_url(url)
    assert "pool" not in plain["OPTIONS"] and not plain["CONN_HEALTH_CHECKS"]


@pytest.mark.django_db
def test_a_statement_run_often_is_prepared_on_its_connection(owner):
    """PostgreSQL parses and plans a statement a pooled connection runs often once, not at
    every run's start and end (``DB_PREPARE_THRESHOLD``): Django's default prepares none."""
    from django.db import connection

    from sessions_app.selectors import session_for_user
    from sessions_app.services.sessions import create_session

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    session = create_session(owner=owner)
    for _ in range(6):
        assert session_for_user(owner, session.id).id == session.id
    prepared = connection.connection.execute(
        "SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
        ['%FROM "sessions_app_session"%'],
    ).fetchall()
    assert prepared, "the session read is prepared after its fifth run"


def test_prepared_statements_can_be_turned_off(monkeypatch):
    url = "postgres://u@127.0.0.1:5432/db"
    options = database_from_url(url)["OPTIONS"]
    assert options["server_side_binding"] is True and options["prepare_threshold"] == 5
    monkeypatch.setenv("DB_PREPARE_THRESHOLD", "0")
    options = database_from_url(url)["OPTIONS"]
    assert "server_side_binding" not in options and "prepare_threshold" not in options
