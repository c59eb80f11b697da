"""Two users in two browser windows: one works with the agent and shares; the other opens the
link, sees the conversation read-only, forks it and continues in their own session while the
owner's session stays as it was; the owner revokes and the link shows "not found"."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from .ui import LAST_ASSISTANT_TEXT, files_on_disk, login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(240)
OWN_SERVER = True  # a user of a fixed name (bob) (conftest.py: not the shared server)

SHOTS = Path(os.environ.get("CHAT_SCREENSHOT", "/tmp/chat.png")).parent


def test_a_shared_conversation_is_forked_by_another_user(browser, server):
    server.manage("adduser", "bob", "--password", "bob-password")
    owner_ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    other_ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    owner, other = owner_ctx.new_page(), other_ctx.new_page()
    for page in (owner, other):
        page.set_default_timeout(20_000)
    try:
        _flow(owner, other, server)
    except Exception:
        print(server.logs())
        for name, page in (("share-owner", owner), ("share-other", other)):
            with contextlib.suppress(Exception):  # best effort on the way out
                page.screenshot(path=str(SHOTS / f"{name}-failure.png"), full_page=True)
        raise
    finally:
        owner_ctx.close()
        other_ctx.close()


def _flow(owner, other, server) -> None:
    login(owner, server)
    sid = new_session(owner)
    send(owner, "write plan.txt day one\nsay planned")
    owner.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'planned'")
    wait_idle(owner)

    owner.click("#session-menu summary")
    owner.click("#share")
    owner.wait_for_selector("#share-box:not([hidden])")
    url = owner.input_value("#share-url")
    assert "/s/" in url

    # -- the other user opens the link: read-only, files there ---------------------------------
    login(other, server, "bob", "bob-password")
    other.goto(url)
    other.wait_for_selector("#fork-shared")
    assert "planned" in other.locator("#messages").inner_text()
    assert other.locator("#composer").count() == 0, "no way to write"
    other.locator("#files li", has_text="plan.txt").click()
    other.wait_for_function("() => document.getElementById('file-view').textContent === 'day one'")
    other.locator("details.tool summary").first.click()
    assert other.locator("details.tool pre.output").first.is_visible()
    other.screenshot(path=str(SHOTS / "shared.png"), full_page=True)

    # -- forks it, continues in their own session ----------------------------------------------
    other.click("#fork-shared")
    other.wait_for_url(lambda u: "/sessions/ses_" in u and f"/sessions/{sid}/" not in u)
    fork_id = other.url.rstrip("/").rsplit("/", 1)[-1]
    wait_idle(other)
    send(other, "append plan.txt day two\nsay extended")
    other.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'extended'")
    wait_idle(other)
    assert files_on_disk(server, fork_id) == {"plan.txt": "day oneday two\n"}
    assert files_on_disk(server, sid) == {"plan.txt": "day one"}, "the owner's files unchanged"
    owner.reload()
    owner.wait_for_selector("#messages .msg.user")
    assert owner.locator("#messages .msg.user").count() == 1

    # -- the owner revokes: the link is gone ---------------------------------------------------
    owner.click("#session-menu summary")
    owner.click("#share")
    owner.wait_for_selector("#share-box:not([hidden])")
    owner.click("#revoke-share")
    owner.wait_for_selector("#share-box", state="hidden")
    response = other.goto(url)
    assert response.status == 404
    assert "Not found" in other.locator("h1").inner_text()


def test_a_slow_answer_from_the_page_load_never_brings_back_a_revoked_link(browser, server):
    """The chat asks for the session's link when it loads; a click that shares and then
    revokes may be answered first. The load's late answer must not show the revoked link
    again (the owner would copy a dead URL, as the flaky revoke above once showed)."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    page.set_default_timeout(20_000)
    try:
        login(page, server)
        sid = new_session(page)
        page.click("#session-menu summary")
        page.click("#share")
        page.wait_for_selector("#share-box:not([hidden])")
        held = []

        def hold_the_load(route, request):  # noqa: ANN001
            if request.method == "GET" and not held:
                # The server answers now (the link exists); the page gets it after the revoke.
                held.append((route, route.fetch()))
            else:
                route.continue_()

        page.route(f"**/api/sessions/{sid}/share/", hold_the_load)
        page.reload()
        for _ in range(200):  # the load asks once the session has loaded: wait for it
            if held:
                break
            page.wait_for_timeout(50)
        assert held, "the page asked for its link when it loaded"
        page.click("#session-menu summary")
        page.click("#share")  # a new link, shown
        page.wait_for_selector("#share-box:not([hidden])")
        page.click("#revoke-share")
        page.wait_for_selector("#share-box", state="hidden")
        route, answer = held[0]
        route.fulfill(response=answer)  # the load's answer: the link before the revoke
        page.wait_for_timeout(500)
        assert page.evaluate("() => document.getElementById('share-box').hidden"), (
            "a revoked link came back: " + page.input_value("#share-url")
        )
    finally:
        ctx.close()
