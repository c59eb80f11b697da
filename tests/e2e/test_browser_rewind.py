"""Rewind modes and cost per branch in the browser (docs/semantics.md §14.5, §14.6): from a
message's ▾ beside "↺ revert to here", "Files only" puts the files back and leaves the messages
(Undo brings the files back), "Conversation only" moves the conversation and leaves the files; the
Lineage panel shows the session's own cost and, in a fork, what its history cost apart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .ui import files_on_disk, login, new_session, prompt_back, send, wait_idle

pytestmark = pytest.mark.timeout(240)

SHOTS = Path(os.environ.get("CHAT_SCREENSHOT", "/tmp/chat.png")).parent


def test_rewind_files_only_then_conversation_only_and_the_lineage_costs(page, server):
    # ``page`` (tests/e2e/conftest.py) fails the test on a console error or a failed request.
    try:
        _flow(page, server)
    except Exception:
        page.screenshot(path=str(SHOTS / "rewind-failure.png"), full_page=True)
        raise


def rewind(page, message, mode: str) -> None:
    message.hover()
    message.locator("> .actions").get_by_role("button", name="Rewind options").click()
    message.get_by_role("menuitem", name=mode).click()


def listed(page, path: str, present: bool) -> None:
    found = f"!!document.querySelector('#files li[data-path=\"{path}\"]')"
    page.wait_for_function(f"() => {found} === {str(present).lower()}")


def _flow(page, server) -> None:
    login(page, server)
    sid = new_session(page)
    for script in ("write a.txt A1", "write b.txt B1\nappend a.txt more"):
        send(page, script)
        wait_idle(page)
    page.wait_for_function("() => document.querySelectorAll('.tool .state.completed').length === 3")
    both = {"a.txt": "A1more\n", "b.txt": "B1"}
    assert files_on_disk(server, sid) == both
    listed(page, "b.txt", True)
    users = page.locator("#messages .msg.user")
    second = users.nth(1)

    # -- Files only: the files go back, every message stays, no pending revert ----------------
    rewind(page, second, "Files only")
    page.wait_for_selector("#files-rewound:not([hidden])")
    listed(page, "b.txt", False)
    assert files_on_disk(server, sid) == {"a.txt": "A1"}
    assert page.locator("#revert-bar").is_hidden()
    assert users.count() == 2
    assert page.locator("#messages .msg.reverted").count() == 0
    assert page.input_value("#prompt") == ""
    page.click("#undo-files-rewind")
    page.wait_for_selector("#files-rewound", state="hidden")
    listed(page, "b.txt", True)
    assert files_on_disk(server, sid) == both

    # -- Conversation only: the conversation moves back, the files stay ---------------------
    rewind(page, second, "Conversation only")
    page.wait_for_selector("#revert-bar:not([hidden])")
    assert "conversation only" in page.locator("#revert-bar").inner_text()
    assert page.locator("#messages .msg.reverted").count() >= 2
    prompt_back(page, "write b.txt B1\nappend a.txt more")
    assert files_on_disk(server, sid) == both
    listed(page, "b.txt", True)
    page.click("#unrevert")
    page.wait_for_selector("#revert-bar", state="hidden")
    assert files_on_disk(server, sid) == both
    assert page.input_value("#prompt") == ""

    # -- The lineage panel: own cost here; in a fork, the inherited cost apart ----------------
    own = page.locator("#lineage-usage .usage-own")
    own.wait_for()
    assert "call" in own.inner_text()
    assert page.locator("#lineage-usage .usage-inherited").count() == 0
    second.hover()
    second.locator("> .actions .fork-here").click()
    page.wait_for_function(f"() => !location.pathname.includes({sid!r})")
    page.wait_for_url("**/sessions/ses_*/")
    wait_idle(page)
    inherited = page.locator("#lineage-usage .usage-inherited")
    inherited.wait_for()
    assert "call" in inherited.inner_text()
    assert page.locator("#lineage-usage .usage-own").inner_text().startswith("0 calls")
