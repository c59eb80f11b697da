from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from runs_app.models import Run


@pytest.fixture(autouse=True)
def _workspace(settings, tmp_path):
    settings.WORKSPACE_ROOT = tmp_path / "workspaces"
    settings.SCRIPTED_DEFAULT_PACE_MS = 0
    settings.RUN_EXECUTOR = "thread"
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


def runs_idle(session_id: str) -> bool:
    """No run of the session is still to finish."""
    return not Run.objects.filter(session_id=session_id).exclude(status__in=Run.TERMINAL).exists()
