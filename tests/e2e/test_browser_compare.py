"""Compare in the browser (issue 27, item 1), as a user tries it: two branches of a session
(a second turn, then a new question from the first answer), Compare from the branch switcher
shows both conversations from their common ancestor and the files that differ, a file's
diff unified and side by side; "Compare with…" on an earlier message compares it with the
head; Escape closes the view."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from .ui import LAST_ASSISTANT_TEXT, login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(240)

SHOTS = Path(os.environ.get("CHAT_SCREENSHOT", "/tmp/chat.png")).parent
DIALOG = "#compare"


def side_texts(page, name: str) -> list[str]:
    return page.locator(
        f'{DIALOG} section[aria-label="Side {name}"] .compare-msg .text'
    ).all_inner_texts()


def file_paths(page) -> list[str]:
    return page.locator(f"{DIALOG} .compare-file-list code").all_inner_texts()


def test_two_branches_are_compared_side_by_side(page, server):
    try:
        _flow(page, server)
    except Exception:
        with contextlib.suppress(Exception):  # best effort on the way out
            page.screenshot(path=str(SHOTS / "compare-failure.png"), full_page=True)
        raise


def _flow(page, server) -> None:
    login(page, server)
    new_session(page)
    send(page, "write base.txt base\nsay one")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'one'")
    wait_idle(page)
    send(page, "write a.txt A\nappend base.txt more\nsay branch a")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'branch a'")
    wait_idle(page)

    # -- a second branch: a new question from the first answer ---------------------------------
    first_answer = page.locator("#messages .msg.assistant", has_text="one").last
    first_answer.hover()
    first_answer.get_by_role(
        "button", name="Ask a new question from this point, as a new branch"
    ).click()
    page.wait_for_selector("#continue-bar:not([hidden])")
    send(page, "write b.txt B\nsay branch b")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'branch b'")
    wait_idle(page)
    page.wait_for_function(
        "() => document.querySelectorAll('#messages .msg.user')[1]"
        "?.querySelector('.branches .count')?.textContent === '2/2'"
    )

    # -- Compare from the branch switcher: this branch (b) against the other (a) ---------------
    second_user = page.locator("#messages .msg.user").nth(1)
    second_user.get_by_role("button", name="Compare the branches").click()
    dialog = page.locator(DIALOG)
    dialog.wait_for(state="visible")
    page.wait_for_function(
        "() => document.querySelectorAll('#compare .compare-file-list code').length === 3"
    )
    assert side_texts(page, "A")[-1] == "branch b"
    assert side_texts(page, "B")[-1] == "branch a"
    assert "one" not in side_texts(page, "A") + side_texts(page, "B"), "from the common ancestor"
    assert file_paths(page) == ["a.txt", "b.txt", "base.txt"]
    counts = dialog.locator(".compare-file-list li", has_text="base.txt").inner_text()
    assert "modified" in counts and "+1" in counts and "−1" in counts

    # A file's diff, unified, then side by side.
    dialog.locator(".compare-file-list button", has_text="base.txt").click()
    page.wait_for_function(
        "() => document.querySelector('#compare .compare-diff .viewer-name')?.textContent"
        " === 'base.txt'"
    )
    unified = dialog.locator(".compare-diff pre.diff-view").inner_text()
    assert "-base" in unified and "+basemore" in unified
    dialog.get_by_role("button", name="Show the diff side by side").click()
    split = dialog.locator("table.diff-split")
    split.wait_for()
    assert split.locator("td.del").first.inner_text() == "base"
    assert split.locator("td.add").first.inner_text() == "basemore"
    page.screenshot(path="/tmp/compare.png")
    page.keyboard.press("Escape")
    dialog.wait_for(state="hidden")

    # -- "Compare with…" on the first answer: that point against the head ----------------------
    first_answer = page.locator("#messages .msg.assistant", has_text="one").last
    first_answer.hover()
    first_answer.get_by_role("button", name="Compare with…").click()
    dialog.wait_for(state="visible")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#compare .compare-file-list code')]"
        ".map(e => e.textContent).join() === 'b.txt'"
    )
    assert side_texts(page, "A") == []
    assert side_texts(page, "B")[-1] == "branch b"
    # The diff is drawn as last chosen (side by side).
    dialog.locator("table.diff-split td.add", has_text="B").wait_for()
    dialog.get_by_role("button", name="Show the diff unified").click()
    page.wait_for_function(
        "() => document.querySelector('#compare .compare-diff pre.diff-view')"
        "?.textContent.includes('+B')"
    )
    dialog.get_by_role("button", name="Close the comparison").click()
    dialog.wait_for(state="hidden")
