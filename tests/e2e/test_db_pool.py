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
