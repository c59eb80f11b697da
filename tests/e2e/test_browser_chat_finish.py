"""The chat, finished (issue 28, items 4, 5, 6, 9, 11, 12): stale views, Stop and Resume,
Regenerate's word, dark mode, names, and the small things — each driven in Debian's Chromium
against the real stack, each failing on the chat as it was before."""

from __future__ import annotations

import re
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.support.embedded_server import EmbeddedServer

from .ui import LAST_ASSISTANT_TEXT, login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(300)
OWN_SERVER = True  # users and quotas of fixed names (conftest.py: not the shared server)

USER = """
from django.contrib.auth.models import User
user, _ = User.objects.get_or_create(username={name!r})
user.set_password({name!r} + "-password")
user.save()
"""

USER_QUOTA = """
from django.contrib.auth.models import User
from quotas_app.models import Quota
Quota.objects.update_or_create(user=User.objects.get(username={name!r}),
                               defaults={{"tokens_per_day": {limit}}})
"""


def answer(page, text: str) -> None:
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === {text!r}", timeout=40_000)
    wait_idle(page)


def user_named(server, name: str) -> tuple[str, str]:
    server.manage("shell", "-c", USER.format(name=name))
    return name, f"{name}-password"


def open_diff(page, name: str) -> None:
    page.locator("#changes li", has_text=name).get_by_role("button").click()
    expect(page.locator("#diff-view")).to_be_visible()
    expect(page.locator("#diff-view .viewer-name")).to_have_text(name)


# -- 4. stale views ----------------------------------------------------------------------------
def test_an_open_diff_closes_when_a_revert_an_edit_or_a_branch_switch_takes_its_file(page, server):
    login(page, server)
    new_session(page)
    send(page, "write a.txt one\nsay first")
    answer(page, "first")
    send(page, "write b.txt two\nsay second")
    answer(page, "second")
    diff = page.locator("#diff-view")

    open_diff(page, "b.txt")
    second = page.locator("#messages .msg.user").nth(1)
    second.hover()
    second.get_by_role("button", name="Revert to here").click()
    page.wait_for_selector("#revert-bar:not([hidden])")
    expect(diff).to_be_hidden()  # b.txt is no change any more
    page.click("#unrevert")
    page.wait_for_selector("#revert-bar", state="hidden")

    # An edit of the second message into another file: b.txt leaves the changes.
    open_diff(page, "b.txt")
    second.hover()
    second.get_by_role("button", name="Edit", exact=True).click()
    second.locator("textarea.edit-text").fill("write c.txt three\nsay third")
    second.get_by_role("button", name="Send the edited message").click()
    answer(page, "third")
    page.locator("#changes li", has_text="c.txt").wait_for()
    expect(diff).to_be_hidden()

    # A branch switch back to b.txt's branch: c.txt's open diff closes.
    open_diff(page, "c.txt")
    page.locator("#messages .msg.user").nth(1).get_by_role("button", name="Previous branch").click()
    page.locator("#changes li", has_text="b.txt").wait_for()
    expect(diff).to_be_hidden()


# -- 5. Stop and Resume ------------------------------------------------------------------------
def test_a_stopped_answer_says_stopped_and_resume_goes_on_in_the_same_bubble(page, server):
    login(page, server)
    sid = new_session(page)
    words = "one two three four five six seven eight nine ten"
    send(page, f"pace 300\nsay {words}")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})()?.startsWith('one two')")
    page.click("#stop")
    wait_idle(page)
    stopped = page.locator("#messages .msg.assistant").first
    expect(stopped.locator(".msg-note")).to_have_text("Stopped")
    assert page.locator("#messages .msg-error").count() == 0

    page.click("#resume")
    page.wait_for_function(
        "() => document.getElementById('notice').textContent.includes('where it stopped')"
    )
    answer(page, words)
    # One answer, continued in its bubble (docs/semantics.md §1.12): no second bubble that
    # starts again, no "Stopped" left under it.
    assert page.locator("#messages .msg.assistant").count() == 1
    expect(stopped.locator(".text")).to_have_text(words)
    expect(stopped.locator(".msg-note")).to_have_count(0)
    assert page.locator("#messages .msg-error").count() == 0
    assert page.locator("#error").is_hidden()
    listed = page.request.get(f"{server.url}/api/sessions/{sid}/messages/").json()["results"]
    (first,) = [m for m in listed if m["role"] == "assistant"]
    assert first["error"] is None and first["completed_at"]


# -- 6. Regenerate -----------------------------------------------------------------------------
def test_regenerate_says_the_same_answer_again_and_names_no_switcher_that_is_not_there(
    page, server
):
    login(page, server)
    new_session(page)
    send(page, "say the same words")
    answer(page, "the same words")
    last = page.locator("#messages .msg.assistant").last
    last.hover()
    last.get_by_role("button", name="Answer again from here (tools are not run again)").click()
    page.wait_for_function(
        "() => document.getElementById('notice').textContent.startsWith('Regenerated')",
        timeout=40_000,
    )
    wait_idle(page)
    said = page.locator("#notice").text_content()
    assert "the same answer again" in said, said
    switchers = page.locator("#messages .branches").count()
    assert ("‹ ›" in said) == (switchers > 0), (said, switchers)


# -- 9. dark mode ------------------------------------------------------------------------------
CODE_STRING_COLOR = """() => getComputedStyle(
  document.querySelector('#messages .md pre code.hljs .hljs-string')).color"""
BODY_BACKGROUND = "() => getComputedStyle(document.body).backgroundColor"


def dark(rgb: str) -> bool:
    return sum(int(n) for n in re.findall(r"\d+", rgb)[:3]) < 200


def test_dark_mode_follows_the_browser_and_the_switch_is_remembered(page, server):
    page.emulate_media(color_scheme="dark")
    login(page, server)
    new_session(page)
    send(page, "say ```python\\nprint('hi')\\n```")
    page.wait_for_selector("#messages .md pre code.hljs .hljs-string")
    wait_idle(page)
    assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
    assert dark(page.evaluate(BODY_BACKGROUND))
    assert page.evaluate(CODE_STRING_COLOR) == "rgb(171, 227, 56)"  # a11y-dark's string
    switch = page.locator("#theme-switch")
    expect(switch).to_have_attribute("aria-pressed", "true")

    switch.click()  # light, against the browser's dark: remembered
    assert page.evaluate("() => document.documentElement.dataset.theme") == "light"
    assert not dark(page.evaluate(BODY_BACKGROUND))
    assert page.evaluate(CODE_STRING_COLOR) == "rgb(0, 128, 0)"  # a11y-light's string
    page.reload()
    page.wait_for_selector("#messages .md pre code.hljs .hljs-string")
    assert page.evaluate("() => document.documentElement.dataset.theme") == "light"
    expect(page.locator("#theme-switch")).to_have_attribute("aria-pressed", "false")
    assert page.evaluate("() => localStorage.getItem('theme')") == "light"

    page.locator("#theme-switch").click()  # the browser's own scheme again: followed
    assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
    assert page.evaluate("() => localStorage.getItem('theme')") is None
    page.emulate_media(color_scheme="light")
    page.wait_for_function("() => document.documentElement.dataset.theme === 'light'")


# -- 11. names ---------------------------------------------------------------------------------
def test_forks_of_a_share_are_numbered_and_say_where_they_came_from(page, server, browser):
    bob, password = user_named(server, "bob-finish")
    login(page, server)
    new_session(page)
    send(page, "say words to share")
    answer(page, "words to share")
    page.click("#session-menu summary")
    page.click("#share")
    page.wait_for_selector("#share-box:not([hidden])")
    url = page.input_value("#share-url")

    other = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        tab = other.new_page()
        login(tab, server, bob, password)
        for _ in range(2):
            tab.goto(url)
            tab.click("#fork-shared")
            tab.wait_for_url("**/sessions/ses_*/")
        lineage = tab.locator("#lineage")
        expect(lineage).to_contain_text("Forked from a shared session: “New session” (demo’s).")
        assert "Not forked yet" not in lineage.inner_text()
        titles = tab.locator("#sidebar-list a")
        expect(titles).to_have_count(2)
        assert sorted(titles.all_inner_texts()) == ["Fork 2 of New session", "Fork of New session"]

        # The session list names the fork with an icon drawn in the page's own colours.
        tab.goto(f"{server.url}/")
        line = tab.locator("li .lineage").first
        expect(line).to_contain_text("fork of a shared session")
        assert line.locator("svg.icon").count() == 1
        assert "⑂" not in tab.content()
    finally:
        other.close()


# -- 12. small things --------------------------------------------------------------------------
def test_the_shared_page_shows_a_compaction_as_the_divider_and_the_whole_link(page, server):
    login(page, server)
    new_session(page)
    for word in ("one", "two", "three"):
        send(page, f"say {word}")
        answer(page, word)
    page.click("#session-menu summary")
    page.click("#compact")
    page.locator("#messages details.compaction").wait_for()
    wait_idle(page)

    page.click("#session-menu summary")
    menu = page.locator("#session-menu")
    expect(menu.get_by_role("heading", name="Share")).to_be_visible()
    page.click("#share")
    page.wait_for_selector("#share-box:not([hidden])")
    link = page.locator("#share-url")
    whole = link.evaluate(
        "e => e.scrollWidth <= e.clientWidth + 1 && e.scrollHeight <= e.clientHeight + 1"
    )
    assert whole, "the link box shows the whole link"
    url = page.input_value("#share-url")

    page.goto(url)
    divider = page.locator("#messages details.compaction")
    expect(divider).to_have_count(1)
    assert "messages summarised" in divider.locator("summary").inner_text()
    empty = page.evaluate(
        "() => [...document.querySelectorAll('#messages .msg')]"
        ".filter(m => !m.innerText.trim()).length"
    )
    assert empty == 0, "no empty bubble"
    assert page.locator("#messages .msg:has(details.compaction)").evaluate(
        "m => !m.classList.contains('assistant')"
    )


@pytest.mark.allow_status(429)
def test_the_budget_line_and_the_refusal_say_the_time_the_same_way(server, browser):
    name, password = user_named(server, "carol-finish")
    server.manage("shell", "-c", USER_QUOTA.format(name=name, limit=10))
    context = browser.new_context(
        viewport={"width": 1280, "height": 900}, timezone_id="Asia/Tokyo", locale="en-GB"
    )
    try:
        page = context.new_page()
        login(page, server, name, password)
        new_session(page)
        send(page, "say over the budget")
        answer(page, "over the budget")
        page.fill("#prompt", "say refused")
        page.click("#send")
        page.wait_for_function(
            "() => document.getElementById('error').textContent.includes('resets at')"
        )
        page.wait_for_function(
            "() => document.getElementById('budget').textContent.includes('(back ')"
        )
        back = re.search(r"\(back (.+)\)", page.inner_text("#budget"))[1]
        refusal = page.inner_text("#error")
        assert f"resets at {back}." in refusal, (back, refusal)
        assert "UTC" not in refusal and "GMT+9" in back, back  # the reader's zone, named
    finally:
        context.close()


def test_shell_says_off_in_the_permissions_menu_where_the_deployment_disables_it(page):
    tmp = Path(tempfile.mkdtemp(prefix=f"agentplat-e2e-{uuid.uuid4().hex[:6]}-"))
    server = EmbeddedServer(tmp, AGENT_ALLOW_SHELL="false")
    try:
        server.start()
        login(page, server)
        new_session(page)
        page.click("#session-menu summary")
        shell = page.locator("select[data-tool=shell]")
        expect(shell).to_have_value("off")
        expect(shell).to_be_disabled()
        assert "disabled" in shell.get_attribute("title")
        expect(page.locator("select[data-tool=write]")).to_have_value("allow")
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_model_error_is_shown_once(page, server):
    login(page, server)
    new_session(page)
    send(page, "fail the provider went away")
    page.locator("#messages .msg-error", has_text="the provider went away").wait_for()
    wait_idle(page)
    page.wait_for_timeout(800)  # the run's own error event has come too
    assert page.locator("#messages .msg-error").count() == 1
    box = page.locator("#error")
    assert box.is_hidden() or "the provider went away" not in box.inner_text()
