"""Issue 12, item 8, through the real path: Daphne, Redis, a Celery worker, PostgreSQL. A
socket opened with ``?token=`` closes with 4403 within a few seconds of its token being
deleted; a socket on other credentials stays open and keeps receiving events."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from .stack import base_env, services_database_url

pytestmark = pytest.mark.timeout(240)
INTERVAL = 0.5  # WS_AUTH_RECHECK_SECONDS of the started Daphne


def _assert_subscribed(ws: ClientConnection, sid: str) -> None:
    assert json.loads(ws.recv(timeout=10)) == {"type": "subscribed", "session_id": sid}


@pytest.mark.django_db(transaction=True)
def test_a_token_socket_closes_with_4403_when_its_token_is_deleted(procs, tmp_path):
    env = base_env(
        DATABASE_URL=services_database_url(),
        REDIS_URL=settings.REDIS_URL,
        WORKSPACE_ROOT=str(tmp_path / "ws"),
        WS_AUTH_RECHECK_SECONDS=str(INTERVAL),
    )
    alice = Token.objects.create(user=User.objects.create_user("alice", password="pw"))
    bob = Token.objects.create(user=User.objects.create_user("bob", password="pw"))
    host = procs.daphne(env, tmp_path)
    procs.worker(env, tmp_path)
    sids = {
        token.key: httpx.post(
            f"http://{host}/api/sessions/",
            json={"title": "ws"},
            headers={"Authorization": f"Token {token.key}"},
            timeout=30,
        ).json()["id"]
        for token in (alice, bob)
    }
    url = f"ws://{host}/ws/sessions/{{}}/?token={{}}"
    try:
        with (
            connect(url.format(sids[alice.key], alice.key), open_timeout=10) as revoked,
            connect(url.format(sids[bob.key], bob.key), open_timeout=10) as untouched,
        ):
            _run(revoked, untouched, alice, bob, sids, host)
    except Exception:
        print(procs.logs())
        raise


def _run(
    revoked: ClientConnection,
    untouched: ClientConnection,
    alice: Token,
    bob: Token,
    sids: dict[str, str],
    host: str,
) -> None:
    _assert_subscribed(revoked, sids[alice.key])
    _assert_subscribed(untouched, sids[bob.key])
    time.sleep(4 * INTERVAL)  # several rechecks pass while nothing changes
    for ws in (revoked, untouched):
        ws.send('{ "type" : "ping" }')
        assert json.loads(ws.recv(timeout=5)) == {"type": "pong"}

    Token.objects.filter(key=alice.key).delete()
    started = time.monotonic()
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            revoked.recv(timeout=10)
    elapsed = time.monotonic() - started
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403
    assert elapsed < INTERVAL + 3, f"closed after {elapsed:.1f}s"

    # Bob's socket outlived Alice's revocation and still gets his session's events.
    response = httpx.post(
        f"http://{host}/api/sessions/{sids[bob.key]}/runs/",
        json={"messages": [{"role": "user", "content": "say hello"}]},
        headers={"Authorization": f"Token {bob.key}"},
        timeout=30,
    )
    assert response.status_code == 202, response.text
    event = json.loads(untouched.recv(timeout=30))
    assert event["session_id"] == sids[bob.key] and "seq" in event
