"""History moves in the browser, as a new user tries them (issue 5, "done when"): roll back
two turns and switch back; continue an old answer with a new question and see it as a
branch; regenerate; fork the session at an earlier message and find the files there as they
were at that point."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from .ui import LAST_ASSISTANT_TEXT, files_on_disk, login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(240)

SHOTS = Path(os.environ.get("CHAT_SCREENSHOT", "/tmp/chat.png")).parent

USER_TEXTS = (
    "() => [...document.querySelectorAll('#messages .msg.user .text')].map(e => e.textContent)"
)


def users(page) -> list[str]:
    return page.evaluate(USER_TEXTS)


def wait_users(page, expected: list[str]) -> None:
    page.wait_for_function(
        f"(want) => JSON.stringify(({USER_TEXTS})()) === JSON.stringify(want)", arg=expected
    )


def test_rollback_continue_regenerate_and_fork_in_the_browser(page, server):
    try:
        _flow(page, server)
    except Exception:
        with contextlib.suppress(Exception):  # best effort on the way out
            page.screenshot(path=str(SHOTS / "branches-failure.png"), full_page=True)
        raise


def _flow(page, server) -> None:
    login(page, server)
    sid = new_session(page)
    turns = [
        "write a.txt one\nsay first",
        "write a.txt two\nsay second",
        "write a.txt three\nsay third",
    ]
    for i, text in enumerate(turns):
        send(page, text)
        page.wait_for_function(
            f"() => ({LAST_ASSISTANT_TEXT})() === {['first', 'second', 'third'][i]!r}"
        )
        wait_idle(page)
    assert files_on_disk(server, sid) == {"a.txt": "three"}

    # -- roll back two turns from the session menu, then switch back ---------------------------
    page.click("#session-menu summary")
    page.fill("#rollback-n", "2")
    page.click("#rollback")
    wait_users(page, [turns[0]])
    assert files_on_disk(server, sid) == {"a.txt": "three"}, "a rollback leaves the files"
    page.get_by_role("button", name="Switch to the newest later branch").click()
    wait_users(page, turns)

    # -- continue the first answer with a new question: a branch -------------------------------
    first_answer = page.locator("#messages .msg.assistant", has_text="first").last
    first_answer.hover()
    first_answer.get_by_role(
        "button", name="Ask a new question from this point, as a new branch"
    ).click()
    page.wait_for_selector("#continue-bar:not([hidden])")
    send(page, "append a.txt more\nsay branched")
    wait_users(page, [turns[0], "append a.txt more\nsay branched"])
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'branched'")
    wait_idle(page)
    # The files follow the branch: as they were after the first turn, then the new append.
    assert files_on_disk(server, sid) == {"a.txt": "onemore\n"}
    second_user = page.locator("#messages .msg.user").nth(1)
    page.wait_for_function(
        "() => document.querySelectorAll('#messages .msg.user')[1]"
        "?.querySelector('.branches .count')?.textContent === '2/2'"
    )
    page.screenshot(path=str(SHOTS / "branches.png"), full_page=True)
    second_user.get_by_role("button", name="Previous branch").click()
    wait_users(page, turns)
    assert (
        page.locator("#messages .msg.user").nth(1).locator(".branches .count").inner_text() == "1/2"
    )
    page.locator("#messages .msg.user").nth(1).get_by_role("button", name="Next branch").click()
    wait_users(page, [turns[0], "append a.txt more\nsay branched"])

    # -- regenerate the last answer: tools do not run again ------------------------------------
    last = page.locator("#messages .msg.assistant").last
    last.hover()
    before_id = last.get_attribute("data-message-id")
    last.get_by_role("button", name="Answer again from here (tools are not run again)").click()
    page.wait_for_function(
        "(old) => { const all = document.querySelectorAll('#messages .msg.assistant');"
        " const l = all[all.length - 1]; return l && l.dataset.messageId !== old"
        " && l.querySelector('.text')?.textContent === 'branched'; }",
        arg=before_id,
    )
    wait_idle(page)
    assert files_on_disk(server, sid) == {"a.txt": "onemore\n"}, "the append did not run again"
    # The original answer is replaced (hidden from the history), not shown beside the new one.
    page.wait_for_function(
        '(old) => !document.querySelector(`[data-message-id="${old}"]`)', arg=before_id
    )
    assert page.locator("#messages .msg.assistant .text", has_text="branched").count() == 1

    # -- fork the session at the first answer: its files as they were there --------------------
    first_answer = page.locator("#messages .msg.assistant", has_text="first").last
    first_answer.hover()
    first_answer.get_by_role(
        "button", name="Fork the session (chat and files) at this message"
    ).click()
    page.wait_for_url(lambda url: f"/sessions/{sid}/" not in url and "/sessions/ses_" in url)
    fork_id = page.url.rstrip("/").rsplit("/", 1)[-1]
    wait_idle(page)
    wait_users(page, [turns[0]])
    assert files_on_disk(server, fork_id) == {"a.txt": "one"}
    entry = page.locator("#files li", has_text="a.txt")
    entry.wait_for()
    entry.click()
    page.wait_for_function("() => document.querySelector('#file-view pre').textContent === 'one'")
    # The lineage picture shows where it came from.
    page.wait_for_selector("#lineage svg")
    assert "Lineage:" in page.locator("#lineage svg").get_attribute("aria-label")
    assert page.locator(f'#lineage a[href="/sessions/{sid}/"]').count() == 1
    page.screenshot(path=str(SHOTS / "fork.png"), full_page=True)
    # The source is unchanged.
    assert files_on_disk(server, sid) == {"a.txt": "onemore\n"}


def test_an_admin_action_shows_live_in_the_open_chat(browser, server):
    chat_ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    admin_ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    chat, admin = chat_ctx.new_page(), admin_ctx.new_page()
    for page in (chat, admin):
        page.set_default_timeout(20_000)
    try:
        login(chat, server)
        sid = new_session(chat)
        for text in ("say one", "say two"):
            send(chat, text)
            wait_idle(chat)
        wait_users(chat, ["say one", "say two"])

        login(admin, server)
        admin.goto(f"{server.url}/admin/sessions_app/session/")
        admin.check(f'input[name="_selected_action"][value="{sid}"]')
        admin.select_option('select[name="action"]', "rollback_action")
        admin.click('button[name="index"]')
        admin.fill("#num_turns", "1")
        admin.click('input[name="apply"]')
        admin.wait_for_selector(".messagelist")
        assert "Rolled back 1 turn(s)" in admin.locator(".messagelist").inner_text()

        # The open chat follows without a reload: the rolled-back turn leaves the view.
        wait_users(chat, ["say one"])
        chat.get_by_role("button", name="Switch to the newest later branch").wait_for()
    except Exception:
        print(server.logs())
        chat.screenshot(path=str(SHOTS / "admin-live-failure.png"), full_page=True)
        raise
    finally:
        chat_ctx.close()
        admin_ctx.close()
