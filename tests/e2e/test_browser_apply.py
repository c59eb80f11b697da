"""Apply in the browser (issue 27, item 2; issue 46, point 2), as a user tries it: two branches,
Compare shows the other branch's tool calls, each call's button names its file ("Apply keep.txt
to current branch") and takes only that call's change onto the shown branch's files three-way,
even when another call of the same step conflicts; the chat shows the history event and the
Files panel the file; a revert to that event undoes it. A conflicting call is refused with the
file named, and applied with markers when asked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .ui import LAST_ASSISTANT_TEXT, files_on_disk, login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(240)
SHOTS = Path(os.environ.get("CHAT_SCREENSHOT", "/tmp/chat.png")).parent


@pytest.mark.allow_status(409)  # the conflicting step is refused first, on purpose
def test_a_step_of_another_branch_is_applied_from_compare(page, server):
    try:
        _flow(page, server)
    except Exception:
        page.screenshot(path=str(SHOTS / "apply-failure.png"), full_page=True)
        raise


def _flow(page, server) -> None:
    login(page, server)
    sid = new_session(page)
    send(page, "write base.txt base\nsay one")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'one'")
    wait_idle(page)
    # Branch a: one step of two calls, keep.txt (new) and base.txt (conflicting with b's).
    send(page, "write keep.txt good\nwrite base.txt changed-in-a\nsay branch a")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'branch a'")
    wait_idle(page)
    # Branch b, from the first answer; it becomes the head.
    first_answer = page.locator("#messages .msg.assistant", has_text="one").last
    first_answer.hover()
    first_answer.get_by_role(
        "button", name="Ask a new question from this point, as a new branch"
    ).click()
    page.wait_for_selector("#continue-bar:not([hidden])")
    send(page, "write base.txt changed-in-b\nsay branch b")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'branch b'")
    wait_idle(page)
    assert files_on_disk(server, sid) == {"base.txt": "changed-in-b"}

    second_user = page.locator("#messages .msg.user").nth(1)
    second_user.get_by_role("button", name="Compare the branches").click()
    dialog = page.locator("#compare")
    dialog.wait_for(state="visible")
    apply = dialog.locator("button.apply-step")
    apply.first.wait_for()
    # Branch a's calls only (branch b is the one shown), each button naming its file.
    assert apply.count() == 2
    assert apply.all_inner_texts() == [
        "Apply keep.txt to current branch",
        "Apply base.txt to current branch",
    ]
    apply.nth(0).click()
    dialog.locator(".apply-note", has_text="applied: keep.txt").wait_for()
    # Only keep.txt came: base.txt, the step's other call's, conflicts and is left as it was.
    assert files_on_disk(server, sid) == {"base.txt": "changed-in-b", "keep.txt": "good"}
    # base.txt changed on both branches: refused, named; then written with markers.
    apply.nth(1).click()
    dialog.locator(".apply-note", has_text="base.txt").wait_for()
    dialog.get_by_role("button", name="Apply with conflict markers").click()
    dialog.locator(".apply-note", has_text="conflict markers in base.txt").wait_for()
    page.screenshot(path=str(SHOTS / "apply.png"))
    page.keyboard.press("Escape")
    dialog.wait_for(state="hidden")

    page.wait_for_function(
        "() => document.getElementById('messages').innerText.includes("
        "'Applied the write keep.txt call')"
    )
    wait_idle(page)
    on_disk = files_on_disk(server, sid)
    assert on_disk["keep.txt"] == "good"
    assert "<<<<<<<" in on_disk["base.txt"] and "changed-in-a" in on_disk["base.txt"]
    page.locator("#files li", has_text="keep.txt").wait_for()

    # A revert to the first apply undoes both applies.
    event = page.locator("#messages .msg.user", has_text="Applied the write keep.txt call")
    event.hover()
    event.locator("button.revert-here").first.click()
    page.wait_for_selector("#revert-bar:not([hidden])")
    wait_idle(page)
    assert files_on_disk(server, sid) == {"base.txt": "changed-in-b"}
