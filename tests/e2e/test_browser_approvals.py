"""Issue 15, tried as a user would in Chromium: with `write` set to `ask` in the session menu,
`write a.txt x` shows an approval card with the diff; deny with a reason and the agent reads
it; allow the next time; watch a slow command's output appear line by line; stop a long
command and see it stop at once."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from .ui import files_on_disk, login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(180)

SCREENSHOT = Path(os.environ.get("APPROVAL_SCREENSHOT", "/tmp/approval.png"))
CARD = "#messages details.tool.asking"


def test_a_user_asks_to_approve_writes_denies_allows_and_stops_a_command(page, server):
    try:
        _flow(page, server)
    except Exception:
        page.screenshot(path=str(SCREENSHOT.with_name("approval-failure.png")), full_page=True)
        raise


def _flow(page, server) -> None:
    login(page, server)
    sid = new_session(page)

    # -- write: ask, from the session menu ---------------------------------------------------
    page.click("#session-menu summary")
    page.get_by_label("Permission for write").select_option("ask")
    page.wait_for_function(
        "() => document.querySelector('[aria-label=\"Permission for write\"]').value === 'ask'"
    )
    page.click("#session-menu summary")  # close the menu

    # -- the card: what will happen; deny with a reason ---------------------------------------
    send(page, "write a.txt x")
    card = page.locator(CARD)
    card.wait_for()
    page.wait_for_function("() => document.getElementById('status').textContent === 'waiting'")
    preview = card.locator("pre.preview").inner_text()
    assert "+x" in preview and "b/a.txt" in preview
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    card.get_by_label("Reason for denying").fill("call it b.txt")
    card.get_by_role("button", name="Deny this call; the agent reads your reason").click()
    wait_idle(page)
    denied = page.locator("#messages details.tool").first
    denied.get_by_text("Denied by you: call it b.txt").wait_for()
    assert "The user denied this call: call it b.txt" in denied.locator("pre.error").inner_text()
    assert "a.txt" not in files_on_disk(server, sid)

    # -- allow the next time -------------------------------------------------------------------
    send(page, "write a.txt x")
    page.locator(CARD).get_by_role("button", name="Allow this call").click()
    wait_idle(page)
    assert files_on_disk(server, sid)["a.txt"] == "x"

    # -- a slow command's output, line by line -------------------------------------------------
    send(page, "shell for i in 1 2 3 4 5; do echo line$i; sleep 0.7; done")
    live = page.locator("#messages details.tool pre.output.live")
    live.wait_for()
    page.wait_for_function(
        "() => { const o = document.querySelector('#messages pre.output.live');"
        " return o && o.textContent.includes('line2'); }"
    )
    assert "line5" not in live.inner_text(), "seen before the command ended"
    wait_idle(page)
    last_tool = page.locator("#messages details.tool").last
    assert "line5" in last_tool.locator("pre.output").text_content()

    # -- stop a long command: it stops at once -------------------------------------------------
    send(page, "shell echo started; sleep 30")
    page.wait_for_function(
        "() => { const o = document.querySelector('#messages pre.output.live');"
        " return o && o.textContent.includes('started'); }"
    )
    clicked = time.monotonic()
    page.click("#stop")
    wait_idle(page, timeout=5_000)
    assert time.monotonic() - clicked < 2.0
    stopped = page.locator("#messages details.tool").last
    assert "interrupted (cancelled)" in stopped.locator("summary").inner_text()
    assert "started" in stopped.locator("pre.output").text_content()
