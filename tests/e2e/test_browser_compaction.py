"""docs/semantics.md §10 in Chromium: "Compact now" in the session menu; the chat shows the
compaction as a divider that opens to the summary; the conversation goes on after it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .ui import LAST_ASSISTANT_TEXT, login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(120)

SCREENSHOT = Path(os.environ.get("COMPACTION_SCREENSHOT", "/tmp/compaction.png"))


def test_compact_now_shows_a_divider_that_opens_to_the_summary(page, server):
    login(page, server)
    new_session(page)
    for word in ("one", "two", "three"):
        send(page, f"say {word}")
        # The answer first: the badge may still say idle before the run has begun.
        page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === '{word}'")
        wait_idle(page)
    # The model picker shows the session's model; each run shows what it used.
    assert page.get_by_label("Model").input_value() == "scripted"
    usage = page.locator("#messages .usage").last
    usage.wait_for()
    assert usage.inner_text().startswith("run: ") and "tokens in" in usage.inner_text()
    page.click("#session-menu summary")
    page.click("#compact")
    divider = page.locator("#messages details.compaction")
    divider.wait_for()
    wait_idle(page)
    assert "messages summarised" in divider.locator("summary").inner_text()
    divider.locator("summary").click()
    summary = divider.locator(".text").inner_text()
    assert "say one" in summary and "say two" in summary
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    send(page, "say four")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'four'")
