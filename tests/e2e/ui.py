"""What the browser tests share: helpers that drive the chat UI like a user."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

LAST_ASSISTANT_TEXT = """() => {
  const all = document.querySelectorAll('#messages .msg.assistant');
  const last = all[all.length - 1];
  const t = last && last.querySelector('.text');
  return t ? t.textContent : null;
}"""


def send(page, text: str) -> None:
    page.fill("#prompt", text)
    page.click("#send")
    page.wait_for_function("() => document.getElementById('prompt').value === ''")


def turn(page, script: str, answer: str) -> None:
    """Send ``script`` and wait for the answer ``answer`` and the session at rest."""
    send(page, script)
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === {answer!r}", timeout=40_000)
    wait_idle(page)


BADGE_IDLE = "() => document.getElementById('status').textContent.trim() === 'idle'"


def wait_idle(page, timeout: float = 30_000) -> None:
    """Idle at the server (a run just requested holds the session from its request on) and
    in the badge: the badge alone may still say idle before the new run's first event."""
    deadline = time.monotonic() + timeout / 1000
    match = re.search(r"/sessions/(ses_[^/]+)/", page.url)
    while True:
        left = max(1.0, (deadline - time.monotonic()) * 1000)
        page.wait_for_function(BADGE_IDLE, timeout=left)
        if match is None:
            return
        answer = page.request.get(f"{page.url.split('/sessions/')[0]}/api/sessions/{match[1]}/")
        if answer.ok and answer.json()["status"] == "idle" and page.evaluate(BADGE_IDLE):
            return
        if time.monotonic() > deadline:
            raise AssertionError("the session did not become idle")
        page.wait_for_timeout(100)


# The session cookies of each login through the form, by server and user: a later test's
# context takes them instead of the form (the server hashes the password anew each time, a
# second or so a test). A session the server no longer knows (a logout, a new password, a
# restarted server's other database) leads to the login page: then the form, as before.
_logged_in: dict[tuple[str, str, str], list] = {}


def login(page, server, username: str = "demo", password: str = "demo-password") -> None:
    key = (server.url, username, password)
    if key in _logged_in:
        page.context.add_cookies(_logged_in[key])
    page.goto(f"{server.url}/")
    if "/login/" in page.url:
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_url(f"{server.url}/")
        _logged_in[key] = page.context.cookies(server.url)


def new_session(page) -> str:
    page.get_by_role("button", name="New session").click()
    page.wait_for_url("**/sessions/ses_*/")
    wait_idle(page)
    return page.url.rstrip("/").rsplit("/", 1)[-1]


def edit_first_message(page, text: str):  # noqa: ANN201 - a Playwright Locator
    """Open the first user message's editor with ``text`` in it (a new branch once sent with
    its "Send the edited message" button): that message, for the caller to send."""
    first_user = page.locator("#messages .msg.user").first
    first_user.hover()
    first_user.get_by_role("button", name="Edit", exact=True).click()
    first_user.locator("textarea.edit-text").fill(text)
    return first_user


def revert_here(page, message) -> None:  # noqa: ANN001 - a Playwright Locator
    """Revert to the user message ``message`` and wait until the revert is done as the user
    sees it: the revert bar shown and the message's text back in the prompt box. The bar can
    show first (the session's event comes before the revert's answer): typing then would race
    the answer's prompt (a CI run sent "say firstsay streamed past the reload")."""
    said = message.locator("> .text").first.inner_text()
    message.hover()
    message.locator("> .actions button.revert-here").click()
    page.wait_for_selector("#revert-bar:not([hidden])")
    prompt_back(page, said)


def prompt_back(page, said: str) -> None:
    """Wait for a revert's answer to put ``said`` back in the prompt box: the revert bar may
    show before it (by the session's event), and the box is filled only by the answer."""
    page.wait_for_function("(said) => document.getElementById('prompt').value === said", arg=said)


def files_on_disk(server, session_id: str) -> dict[str, str]:
    """The session's worktree as the server left it on disk (``.git`` aside)."""
    root = server.tmp / "workspaces" / session_id
    return {
        p.relative_to(root).as_posix(): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def filter_session_events(page, keep: Callable[[dict], bool]) -> None:  # noqa: ANN001
    """Route the chat's session socket through ``keep``: an event the server sends that
    ``keep(event)`` refuses never reaches the page (a lossy path); the page's own messages
    pass."""

    def route(ws) -> None:  # noqa: ANN001 - Playwright's WebSocketRoute
        server_side = ws.connect_to_server()

        def from_server(message: str | bytes) -> None:
            if keep(json.loads(message)):
                ws.send(message)

        server_side.on_message(from_server)
        ws.on_message(server_side.send)

    page.route_web_socket(re.compile(r"/ws/sessions/"), route)
