from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.db.backends.utils import CursorWrapper
from django.test import TransactionTestCase
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from runs_app.execution import runtime
from runs_app.execution.host import host
from runs_app.models import Run
from runs_app.services.runs import start_run
from runs_app.tools import TOOLS
from sessions_app.services.sessions import create_session
from tests.e2e.shared import SERVER_FIXTURES, stop_shared
from tests.support import fast_db

# A transactional test ends by deleting the rows it left, not by Django's TRUNCATE of every
# table and the content types made again (tests/support/fast_db.py).
TransactionTestCase._fixture_teardown = fast_db.empty_tables


# The files that take longest, each on one process (``--dist loadfile``): they are handed
# out first, so that the suite does not end waiting on one of them while the other process
# idles. The rest follow in their order; the servers' files (tests/e2e/) before the others,
# whose many short tests fill the gaps at the end.
LONGEST_FIRST = (
    "tests/e2e/test_chaos.py",
    "tests/e2e/test_crash.py",
    "tests/e2e/test_waits.py",
    "tests/e2e/test_many_runs.py",
    "tests/test_compaction.py",
    "tests/e2e/test_browser_restart.py",
    "tests/e2e/test_db_fault.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    global _SERVER_FILES
    _SERVER_FILES = {
        _file(item)
        for item in items
        if _file(item).startswith("tests/e2e/") and SERVER_FIXTURES & set(item.fixturenames)
    }

    def weight(item: pytest.Item) -> tuple[int, int]:
        path = _file(item)
        if path in LONGEST_FIRST:
            return (0, LONGEST_FIRST.index(path))
        if path.startswith("tests/e2e/"):  # the files on a live server first: they share it
            return (1, 0 if path in _SERVER_FILES else 1)
        return (2, 0)

    items.sort(key=weight)  # stable: each file's tests keep their order


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


_SERVER_FILES: set[str] = set()  # the test files that use a live server (tests/e2e/shared.py)


def pytest_runtest_setup(item: pytest.Item) -> None:
    # A process's shared live servers are stopped once it goes on to a file that uses none.
    if _file(item) not in _SERVER_FILES:
        stop_shared()


def pytest_sessionfinish(session: pytest.Session) -> None:
    stop_shared()


@pytest.fixture(autouse=True, scope="session")
def _run_host_connections(django_db_setup):
    """The run host's database threads keep their connections; give them back before the
    test database is dropped."""
    yield
    host.close_connections()


@pytest.fixture(autouse=True)
def _runs_settled(_django_db_marker) -> Iterator[None]:
    """A test's runs end before its database is emptied: a run still writing in the host's
    threads while the next transactional test truncates every table deadlocks that flush
    (and fails tests that had nothing to do with it). Those still live are asked to stop."""
    yield
    if not host.settle(timeout=20):
        pytest.fail(f"{host.hosted} run(s) of this test were still going 20 s after it ended")


@pytest.fixture(autouse=True)
def _not_leaving() -> Iterator[None]:
    """A test that drains this process (``runtime.leaving``: its runs go to the default queue
    from then on) leaves the next one a process that is not leaving (found in CI: a drain
    test's leaving made a later test's routed enqueue go to the default queue)."""
    yield
    runtime._leaving.clear()


@pytest.fixture(autouse=True)
def _workspace(settings, tmp_path):
    settings.WORKSPACE_ROOT = tmp_path / "workspaces"
    settings.SCRIPTED_DEFAULT_PACE_MS = 0
    settings.RUN_EXECUTOR = "thread"
    settings.PASSWORD_HASHERS = ["tests.support.fast_db.FastPBKDF2PasswordHasher"]
    return settings.WORKSPACE_ROOT


def _user(name: str) -> User:
    return User.objects.create_user(username=name, password=f"{name}-pw")


@pytest.fixture
def owner(db) -> User:
    return _user("alice")


@pytest.fixture
def outsider(db) -> User:
    return _user("mallory")


def client_for(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        token, _ = Token.objects.get_or_create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def api(owner) -> APIClient:
    return client_for(owner)


@pytest.fixture
def outsider_api(outsider) -> APIClient:
    return client_for(outsider)


def run_turn(api: APIClient, session_id: str, script: str, status: str = "completed") -> dict:
    """One user turn through the API, waited for; it must end in ``status``."""
    run = api.post(
        f"/api/sessions/{session_id}/runs/",
        {"messages": [{"role": "user", "content": script}], "wait": True},
        format="json",
    ).json()
    assert run["status"] == status, run
    return run


def submitted(owner: User, script: str) -> Run:
    """A run admitted in a new session of ``owner``, not handed to any executor yet."""
    return start_run(
        session=create_session(owner=owner),
        user=owner,
        messages=[{"role": "user", "content": script}],
        defer_enqueue=True,
    )


def new_session(api: APIClient, **fields: Any) -> str:
    """A session of ``api``'s user, through the API: its id."""
    return api.post("/api/sessions/", {"title": "t", **fields}, format="json").json()["id"]


@pytest.fixture
def sid(api) -> str:
    return new_session(api)


def wait_until(
    predicate: Callable[[], Any], timeout: float = 20.0, what: str = "it", every: float = 0.03
) -> Any:
    """The predicate's first truthy value within ``timeout`` seconds, else a failure. Waits
    poll: a test never sleeps longer than what it waits for takes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def waiting(monkeypatch) -> threading.Event:  # noqa: ANN001
    """Set when a run's ``wait`` tool begins (a hook on the tool, which the loop looks up by
    name when it calls it): a test that acts while a run waits (a cancel mid-step, a look at
    what a batch wrote before its next tool) acts then, not after a guess of time. Every
    tool before it in the step has ended, and what the checkpoint mode writes after a tool
    is written."""
    started = threading.Event()
    tool = TOOLS["wait"]
    assert tool.afn is not None

    async def afn(ctx, args):  # noqa: ANN001, ANN202
        started.set()
        return await tool.afn(ctx, args)

    def fn(ctx, args):  # noqa: ANN001, ANN202
        started.set()
        return tool.fn(ctx, args)

    monkeypatch.setitem(TOOLS, "wait", dataclasses.replace(tool, fn=fn, afn=afn))
    return started


def runs_idle(session_id: str) -> bool:
    """No run of the session is still to finish."""
    return not Run.objects.filter(session_id=session_id).exclude(status__in=Run.TERMINAL).exists()


@contextmanager
def all_queries() -> Iterator[list[str]]:
    """The SQL of every statement run meanwhile, from any thread (a run's statements run in
    the run host's database threads, each on its own connection, which Django's
    ``CaptureQueriesContext`` does not see). Set the host's keeper apart with long
    ``RUN_LEASE_SECONDS`` / ``RUN_ABORT_POLL_SECONDS`` when counting."""
    seen: list[str] = []
    guard = threading.Lock()
    execute, executemany = CursorWrapper.execute, CursorWrapper.executemany

    def counted_execute(self, sql, params=None):  # noqa: ANN001, ANN202
        with guard:
            seen.append(sql)
        return execute(self, sql, params)

    def counted_executemany(self, sql, param_list):  # noqa: ANN001, ANN202
        with guard:
            seen.append(sql)
        return executemany(self, sql, param_list)

    with (
        mock.patch.object(CursorWrapper, "execute", counted_execute),
        mock.patch.object(CursorWrapper, "executemany", counted_executemany),
    ):
        yield seen
