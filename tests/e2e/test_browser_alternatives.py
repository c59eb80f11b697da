"""Best-of-N in the browser (issue 27, item 3), as a user tries it: "Alternatives…" on a turn
runs it twice at once in two forks, the view shows them side by side with their answers,
changed files and cost, and "Keep this one" makes the second a branch of the session with
its files and the head: the chat shows it and its branch switcher."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .ui import LAST_ASSISTANT_TEXT, files_on_disk, login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(240)

SHOTS = Path(os.environ.get("CHAT_SCREENSHOT", "/tmp/chat.png")).parent
VIEW = "#alternatives-view"


def ask_alternatives(page, *, turn: int, n: int) -> None:
    """ "Alternatives…" on user message ``turn``, ``n`` typed in its form (not started)."""
    message = page.locator("#messages .msg.user").nth(turn)
    message.hover()
    message.locator("button.alternatives").click()
    page.fill("#alternatives-n", str(n))


def test_alternatives_side_by_side_and_keep_one(page, server):
    try:
        _flow(page, server)
    except Exception:
        page.screenshot(path=str(SHOTS / "alternatives-failure.png"), full_page=True)
        raise


def _flow(page, server) -> None:
    login(page, server)
    sid = new_session(page)
    send(page, "write base.txt base\nsay one")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'one'")
    wait_idle(page)
    send(page, "write pick.txt chosen\nsay two")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'two'")
    wait_idle(page)

    ask_alternatives(page, turn=1, n=2)
    page.click("#alternatives-start")
    page.wait_for_selector(VIEW)
    columns = page.locator(f"{VIEW} .alt-col")
    assert columns.count() == 2
    # Both finish: their answers, their files, their cost; then Keep is offered.
    page.wait_for_function(
        f"() => [...document.querySelectorAll('{VIEW} .alt-col button.keep')]"
        ".every((b) => !b.disabled)",
        timeout=60_000,
    )
    for i in range(2):
        column = columns.nth(i)
        # Its own turn only: the answer and the file that turn wrote.
        assert column.locator(".alt-text").inner_text().strip() == "two"
        assert column.locator(".alt-files").inner_text().strip().startswith("pick.txt")
        assert "base.txt" not in column.locator(".alt-files").inner_text()
        assert "tokens" in column.locator(".alt-cost").inner_text()
    page.screenshot(path=str(SHOTS / "alternatives.png"))
    alternative = columns.nth(1).get_attribute("data-session-id")

    columns.nth(1).locator("button.keep").click()
    page.wait_for_selector(VIEW, state="detached")
    # The kept one is a branch here, the head: the switcher counts two answers to turn two.
    page.wait_for_function(
        "() => [...document.querySelectorAll('#messages .branches .count')]"
        ".some((c) => c.textContent.trim() === '2/2')"
    )
    wait_idle(page)
    assert files_on_disk(server, sid) == {"base.txt": "base", "pick.txt": "chosen"}
    lineage = page.request.get(f"{server.url}/api/sessions/{sid}/lineage/").json()
    kinds = {f["id"]: f["lineage_kind"] for f in lineage["forks"]}
    assert kinds[alternative] == "alternative"


def test_the_alternatives_form_stays_open_while_the_conversation_redraws(page, server):
    # The form "how many alternatives" lives in its message; a run from elsewhere (another
    # tab, the API) redraws every message. The form, and what was typed in it, stays.
    login(page, server)
    sid = new_session(page)
    send(page, "say one")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'one'")
    wait_idle(page)
    ask_alternatives(page, turn=0, n=4)
    form = page.locator("#alternatives-ask").element_handle()
    status = page.evaluate(
        """async (sid) => {
            const token = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/)[1];
            const answer = await fetch(`/api/sessions/${sid}/runs/`, {
                method: "POST",
                headers: {"Content-Type": "application/json", "X-CSRFToken": token},
                body: JSON.stringify({messages: [{role: "user", content: "say elsewhere"}]}),
            });
            return answer.status;
        }""",
        sid,
    )
    assert status == 202
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'elsewhere'")
    wait_idle(page)
    assert page.evaluate("(form) => form.isConnected", form)
    assert page.input_value("#alternatives-n") == "4"
    page.click("#alternatives-start")
    page.wait_for_selector(VIEW)
    assert page.locator(f"{VIEW} .alt-col").count() == 4
