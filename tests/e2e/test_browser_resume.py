"""Issue 46, points 4 and 5, in Chromium: the edit box's keys are the main box's (Enter sends,
Shift+Enter adds a line, with the same hint); a `wait` card resumed after Stop loses its
"Stopped" (docs/semantics.md §1.12)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .ui import LAST_ASSISTANT_TEXT, login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(240)
USERS = "() => [...document.querySelectorAll('#messages .msg.user .text')].map(e => e.textContent)"


def answer(page, text: str) -> None:
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === {text!r}", timeout=40_000)
    wait_idle(page)


def test_enter_sends_the_edit_and_shift_enter_adds_a_line(page, server):
    login(page, server)
    new_session(page)
    send(page, "say first")
    answer(page, "first")
    first_user = page.locator("#messages .msg.user").first
    first_user.hover()
    first_user.get_by_role("button", name="Edit", exact=True).click()
    box = first_user.locator("textarea.edit-text")
    box.fill("say second")
    box.press("End")
    box.press("Shift+Enter")
    page.keyboard.type("think more")
    assert box.input_value() == "say second\nthink more", "Shift+Enter adds a line"
    page.screenshot(path="/tmp/h11_edit_box.png")
    # An Enter that confirms an input method's composition is the composition's.
    box.evaluate(
        "b => b.dispatchEvent(new KeyboardEvent('keydown',"
        " {key: 'Enter', isComposing: true, bubbles: true, cancelable: true}))"
    )
    expect(box).to_be_visible()
    box.press("Enter")  # sends (it added a line before)
    expect(box).to_have_count(0)
    first_user = page.locator("#messages .msg.user").first
    answer(page, "second")
    assert page.evaluate(USERS) == ["say second\nthink more"]
    # It says so, as the main box does.
    first_user.hover()
    first_user.get_by_role("button", name="Edit", exact=True).click()
    expect(first_user.locator(".edit-form .composer-hint")).to_have_text(
        "Enter sends · Shift+Enter adds a line"
    )


def test_a_resumed_wait_card_loses_its_stopped_label(page, server):
    login(page, server)
    new_session(page)
    send(page, "say waiting\nwait 6\nsay after")
    card = page.locator("#messages details.tool").first
    expect(card.locator(".state")).to_have_text("running", timeout=20_000)
    page.click("#stop")
    wait_idle(page)
    step = page.locator("#messages .msg.assistant").first
    expect(card.locator(".state")).to_have_text("stopped")
    expect(step.locator(".msg-note")).to_have_text("Stopped")
    # The wait is run again on resume (no side effects, docs/semantics.md §1.5): a short one.
    page.click("#resume")
    answer(page, "after")
    expect(card.locator(".state")).to_have_text("completed")
    expect(step.locator(".msg-note")).to_have_count(0)
    expect(step.locator(".msg-error")).to_have_count(0)  # nor the recovery's sentence as an error
    page.screenshot(path="/tmp/h11_wait.png")
