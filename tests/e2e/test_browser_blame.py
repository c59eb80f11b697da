"""Blame in the browser (issue 27 item 4): the file viewer shows a gutter naming the step that
last changed each run of lines, and a click on it goes to that message in the conversation."""

from __future__ import annotations

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from .ui import login, new_session, send, turn, wait_idle

pytestmark = pytest.mark.timeout(240)

GUTTERS = (
    "() => [...document.querySelectorAll('#file-view .blame-gutter')].map(g => g.dataset.label)"
)


def test_the_gutter_names_each_line_s_step_and_a_click_goes_to_its_message(page, server):
    login(page, server)
    new_session(page)
    turn(page, "append notes.txt alpha\nappend notes.txt beta", "done")
    turn(page, "say second turn\nappend notes.txt gamma", "done")
    for i in range(4):  # a longer conversation: the first step scrolls out of sight
        send(page, f"say filler {i}\\n\\n" + "a long line of filler text\\n\\n" * 8)
        wait_idle(page)
    page.locator("#files li", has_text="notes.txt").click()
    try:
        page.wait_for_selector("#file-view .blame-gutter", timeout=10_000)
    except PlaywrightTimeout:
        # Once in CI the gutter did not come: the viewer's text was redrawn while the blame
        # was asked (a late panel refresh), and the gutter is only laid over the text it
        # was asked for. Opening the file again asks again, as a user would.
        page.locator("#files li", has_text="notes.txt").click()
        page.wait_for_selector("#file-view .blame-gutter")
    # The text is the file's, untouched; the gutter beside it names message and tool.
    text = page.evaluate("() => document.querySelector('#file-view pre').textContent")
    assert text == "alpha\nbeta\ngamma\n"
    assert page.evaluate(GUTTERS) == ["msg 2 · append", "msg 5 · append"]
    first = page.locator("#file-view .blame-gutter").first
    target = first.get_attribute("data-message-id")
    assert target
    message = page.locator(f'.msg[data-message-id="{target}"]')
    page.evaluate(
        "() => { const m = document.getElementById('messages'); m.scrollTop = m.scrollHeight; }"
    )
    page.wait_for_timeout(200)
    assert not _in_view(page, target)
    first.click()
    page.wait_for_function(
        f"""() => document.querySelector('.msg[data-message-id="{target}"]')
            .classList.contains('blame-target')"""
    )
    page.wait_for_function(f"() => ({_IN_VIEW})({target!r})")
    assert "alpha" not in message.inner_text()  # the tool card of the step is there
    page.screenshot(path="/tmp/blame.png")


_IN_VIEW = """(id) => {
  // In sight in the conversation's pane (only the pane scrolls).
  const r = document.querySelector(`.msg[data-message-id="${id}"]`).getBoundingClientRect();
  const pane = document.getElementById('messages').getBoundingClientRect();
  return r.top >= pane.top - 1 && r.bottom <= pane.bottom + 1;
}"""


def _in_view(page, message_id: str) -> bool:
    return page.evaluate(f"({_IN_VIEW})", message_id)
