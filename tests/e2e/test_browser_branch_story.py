"""Branches as workspaces, the whole story in one browser (issue 27's "done when"): a turn run
twice as alternatives, one kept; the other goes on in its own fork and writes a useful file;
back in the session, the lineage panel compares the two sessions from the fork point, one
step of the other is applied onto the kept branch, and blame names the applied change as the
origin of the applied line (and the kept turn's as the origin of the line it wrote)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .ui import files_on_disk, login, new_session, turn, wait_idle

pytestmark = pytest.mark.timeout(300)

SHOTS = Path(os.environ.get("CHAT_SCREENSHOT", "/tmp/chat.png")).parent
VIEW = "#alternatives-view"
DIALOG = "#compare"
GUTTERS = (
    "() => [...document.querySelectorAll('#file-view .blame-gutter')]"
    ".map(g => [g.dataset.start, g.dataset.label, g.dataset.messageId])"
)


def test_alternatives_compare_apply_keep_and_blame(page, server):
    try:
        _story(page, server)
    except Exception:
        page.screenshot(path=str(SHOTS / "branch-story-failure.png"), full_page=True)
        raise


def _story(page, server) -> None:
    login(page, server)
    sid = new_session(page)
    turn(page, "write plan.txt plan\nsay one", "one")
    turn(page, "append notes.txt kept line\nsay two", "two")

    # -- two alternatives of the second turn; keep the second ----------------------------------
    second = page.locator("#messages .msg.user").nth(1)
    second.hover()
    second.locator("button.alternatives").click()
    page.fill("#alternatives-n", "2")
    page.click("#alternatives-start")
    page.wait_for_selector(VIEW)
    page.wait_for_function(
        f"() => [...document.querySelectorAll('{VIEW} .alt-col button.keep')]"
        ".every((b) => !b.disabled)",
        timeout=60_000,
    )
    columns = page.locator(f"{VIEW} .alt-col")
    other = columns.nth(0).get_attribute("data-session-id")
    columns.nth(1).locator("button.keep").click()
    page.wait_for_selector(VIEW, state="detached")
    wait_idle(page)

    # -- the other alternative goes on in its own fork -----------------------------------------
    page.goto(f"{server.url}/sessions/{other}/")
    page.wait_for_selector("#messages .msg.assistant")
    turn(page, "append useful.txt from the other\nsay extra", "extra")
    assert files_on_disk(server, other)["useful.txt"] == "from the other\n"
    assert "useful.txt" not in files_on_disk(server, sid)

    # -- back home: compare with it from the lineage panel -------------------------------------
    page.goto(f"{server.url}/sessions/{sid}/")
    page.wait_for_selector("#messages .msg.assistant")
    compare = page.locator("#lineage .lineage-compare button").first
    compare.wait_for()
    assert compare.get_attribute("aria-label").startswith("Compare this session with")
    page.locator(f'#lineage .lineage-compare button[data-session-id="{other}"]').click()
    dialog = page.locator(DIALOG)
    page.wait_for_function(
        "() => [...document.querySelectorAll('#compare .compare-file-list code')]"
        ".map(c => c.textContent).join() === 'useful.txt'"
    )
    assert "fork point" in dialog.locator(".compare-base").inner_text()
    side_b = dialog.locator('section[aria-label="Side B"]')
    assert "extra" in side_b.inner_text()
    # From the fork point (the first answer): its own run of the second turn, then its extra.
    assert "plan" not in side_b.inner_text(), "the shared first turn is not repeated"
    page.screenshot(path=str(SHOTS / "branch-story-compare.png"))

    # -- apply that step onto the kept branch --------------------------------------------------
    steps = side_b.locator(".tool", has=page.locator("button.apply-step"))
    assert steps.count() == 2  # its append to notes.txt (the same as ours), and useful.txt's
    steps.filter(has_text="useful.txt").locator("button.apply-step").click()
    dialog.locator(".apply-note", has_text="applied: useful.txt").wait_for()
    page.keyboard.press("Escape")
    dialog.wait_for(state="hidden")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#files li[data-path]')]"
        ".some(li => li.dataset.path === 'useful.txt')"
    )
    assert files_on_disk(server, sid) == {
        "plan.txt": "plan",
        "notes.txt": "kept line\n",
        "useful.txt": "from the other\n",
    }

    # -- blame: the applied line's origin is the applied change, notes.txt's the kept turn -----
    page.locator("#files li", has_text="useful.txt").click()
    page.wait_for_selector("#file-view .blame-gutter")
    runs = page.evaluate(GUTTERS)
    assert len(runs) == 1 and runs[0][0] == "1"
    applied_message = runs[0][2]
    listed = page.request.get(f"{server.url}/api/sessions/{sid}/messages/").json()["results"]
    parts = next(m["parts"] for m in listed if m["id"] == applied_message)
    applied = [p for p in parts if p["type"] == "applied"]
    assert len(applied) == 1, parts
    assert applied[0]["source_session_id"] == other
    assert "Applied" in page.locator(f'.msg[data-message-id="{applied_message}"]').inner_text()
    page.locator(f'#file-view .blame-gutter[data-message-id="{applied_message}"]').click()
    page.wait_for_function(
        f"""() => document.querySelector('.msg[data-message-id="{applied_message}"]')
            ?.classList.contains('blame-target')"""
    )

    page.locator("#files li", has_text="notes.txt").click()
    page.wait_for_function(
        "() => document.querySelector('#file-view pre')?.dataset.path === 'notes.txt'"
        " && document.querySelector('#file-view .blame-gutter')"
    )
    (start, label, message_id) = page.evaluate(GUTTERS)[0]
    assert label.startswith("turn ")  # the turn, as the chat counts them (issue 46, 12)
    said = page.locator("#file-view .blame-gutter").first.get_attribute("aria-label")
    assert said.endswith("append"), said  # and its tool, said in words
    # The kept alternative's turn, now a branch of this session: its message is here.
    assert page.locator(f'.msg[data-message-id="{message_id}"]').count() == 1
    page.screenshot(path=str(SHOTS / "branch-story-blame.png"))
