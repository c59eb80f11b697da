from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient


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
