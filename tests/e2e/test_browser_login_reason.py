"""An anonymous visitor of a share link clicks "Log in to fork": the login page says why, names
the shared session, and after logging in they are back on the share page, able to fork."""

from __future__ import annotations

import json
import shutil
import tempfile
import urllib.request
from pathlib import Path

import pytest

from tests.support.embedded_server import EmbeddedServer

pytestmark = pytest.mark.timeout(180)
OWN_SERVER = True  # a user of a fixed name (bob) (conftest.py: not the shared server)

TITLE = "Trip <plan>"


@pytest.fixture(scope="module")
def readable_shares():
    """Embedded mode where anonymous visitors may read a share (so they see its fork button)."""
    tmp = Path(tempfile.mkdtemp(prefix="agentplat-e2e-login-"))
    server = EmbeddedServer(tmp, SHARE_ANONYMOUS_READ="true")
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def api(server: EmbeddedServer, method: str, path: str, body: dict, token: str = "") -> dict:
    request = urllib.request.Request(
        f"{server.url}{path}",
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"}
        | ({"Authorization": f"Token {token}"} if token else {}),
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"{}")


def share_link(server: EmbeddedServer) -> str:
    token = api(
        server, "POST", "/api/auth/token/", {"username": "demo", "password": "demo-password"}
    )
    token = token["token"]
    sid = api(server, "POST", "/api/sessions/", {"title": TITLE}, token)["id"]
    messages = [{"role": "user", "content": "say planned"}]
    run = api(
        server, "POST", f"/api/sessions/{sid}/runs/", {"messages": messages, "wait": True}, token
    )
    assert run["status"] == "completed", run
    return server.url + api(server, "POST", f"/api/sessions/{sid}/share/", {}, token)["url"]


def test_log_in_to_fork_says_why_and_comes_back_to_the_share(page, readable_shares):
    server = readable_shares
    server.manage("adduser", "bob", "--password", "bob-password")
    url = share_link(server)

    page.goto(url)
    assert "planned" in page.locator("#messages").inner_text()
    page.get_by_role("link", name="Log in to fork").click()
    page.wait_for_url(lambda u: "/login/?next=" in u)
    reason = page.locator("#login-reason").inner_text()
    assert f"Log in to fork the shared session “{TITLE}” into your account." in reason

    page.fill("input[name=username]", "bob")
    page.fill("input[name=password]", "bob-password")
    page.click("button[type=submit]")
    page.wait_for_url(url)
    assert page.get_by_role("button", name="Fork into my account").is_visible()
