"""The chat's box, layout and keys as people who use chat apps every day expect them (issue 28,
items 1, 2, 3, 7, 8 and 10): Enter sends; only the conversation scrolls; the phone's drawer,
tables and code blocks; the connection's state; a message while a run goes on; the keyboard.
Each driven in Debian's Chromium against the real stack, at 1280 and 390 px where it applies."""

from __future__ import annotations

import re

import pytest

from .ui import LAST_ASSISTANT_TEXT, login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(240)
OWN_SERVER = True  # seeded history of the demo user (conftest.py: not the shared server)

WIDTHS = [pytest.param(1280, id="1280px"), pytest.param(390, id="390px")]
USERS = "() => [...document.querySelectorAll('#messages .msg.user .text')].map(e => e.textContent)"
FOCUSED = "() => document.activeElement && document.activeElement.id"


def answer(page, text: str) -> None:
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === {text!r}", timeout=40_000)
    wait_idle(page)


def sized(page, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900 if width > 800 else 844})


def rect(page, selector: str) -> dict:
    return page.evaluate(
        "(s) => { const r = document.querySelector(s).getBoundingClientRect();"
        " return {top: r.top, bottom: r.bottom, left: r.left, right: r.right,"
        " width: r.width, height: r.height}; }",
        selector,
    )


# -- 1. Enter sends --------------------------------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
def test_enter_sends_shift_enter_adds_a_line_and_the_box_keeps_the_focus(page, server, width):
    sized(page, width)
    login(page, server)
    new_session(page)
    # The box has the focus when the chat opens, and says how to send.
    page.wait_for_function(f"() => ({FOCUSED})() === 'prompt'")
    placeholder = page.get_attribute("#prompt", "placeholder")
    assert "Enter sends" in placeholder and "Shift+Enter" in placeholder, placeholder

    page.keyboard.type("say first line")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("think more")
    assert page.input_value("#prompt") == "say first line\nthink more"
    assert page.evaluate(USERS) == []  # a new line, not a send

    # Enter while an input method composes (Japanese, Chinese…) is the composition's.
    page.evaluate(
        """() => document.getElementById('prompt').dispatchEvent(new KeyboardEvent('keydown',
             {key: 'Enter', isComposing: true, bubbles: true, cancelable: true}))"""
    )
    page.wait_for_timeout(300)
    assert page.input_value("#prompt") == "say first line\nthink more"
    assert page.evaluate(USERS) == []

    page.keyboard.press("Enter")
    page.wait_for_function("() => document.getElementById('prompt').value === ''")
    answer(page, "first line")
    assert page.evaluate(USERS) == ["say first line\nthink more"]
    assert page.evaluate(FOCUSED) == "prompt", "the box keeps the focus after a send"

    # Ctrl+Enter sends too.
    page.keyboard.type("say second")
    page.keyboard.press("Control+Enter")
    answer(page, "second")
    assert page.evaluate(USERS) == ["say first line\nthink more", "say second"]
    assert page.evaluate(FOCUSED) == "prompt"


def test_a_chat_opened_from_the_sidebar_has_the_box_focused(page, server):
    login(page, server)
    first = new_session(page)
    page.get_by_role("button", name="New", exact=True).click()
    page.wait_for_function(f"() => !location.pathname.includes({first!r})")
    wait_idle(page)
    page.wait_for_function(f"() => ({FOCUSED})() === 'prompt'")


# -- 2. The layout of a chat app -------------------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
def test_only_the_conversation_scrolls_and_the_box_stays_pinned_to_the_bottom(page, server, width):
    out = server.manage("seed_history", "--user", "demo", "--runs", "25", "--title", "long")
    sid = out.split(":")[0].strip()
    sized(page, width)
    login(page, server)
    page.goto(f"{server.url}/sessions/{sid}/")
    wait_idle(page)
    page.wait_for_function(
        "() => document.querySelectorAll('#messages .msg').length >= 20"
    )  # the first page
    height = page.evaluate("() => innerHeight")
    # The page itself does not scroll: the conversation does.
    assert page.evaluate("() => document.scrollingElement.scrollHeight") <= height
    assert page.evaluate("() => document.scrollingElement.scrollWidth") <= width
    pane = "() => { const m = document.getElementById('messages');"
    assert page.evaluate(pane + " return m.scrollHeight > m.clientHeight + 200; }")
    # Opened at its end: the last message is in sight, above the box.
    page.wait_for_function(
        pane + " return m.scrollHeight - m.scrollTop - m.clientHeight < 4; }", timeout=10_000
    )
    fixed = ["header.top", "#composer", ".chat-head"]
    if width > 1100:
        fixed += ["#sidebar", "aside.files"]
    before = {s: rect(page, s) for s in fixed}
    composer = before["#composer"]
    assert composer["bottom"] <= height and composer["top"] > height / 2, composer
    assert before["header.top"]["top"] == 0
    if width > 1100:
        assert before["#sidebar"]["bottom"] <= height
        assert before["aside.files"]["bottom"] <= height
    page.screenshot(path=f"/tmp/chat-layout-{width}.png")

    # Scrolling back through the conversation moves the conversation only.
    page.mouse.move(rect(page, "#messages")["left"] + 40, rect(page, "#messages")["top"] + 40)
    for _ in range(6):
        page.mouse.wheel(0, -1500)
        page.wait_for_timeout(100)
    assert page.evaluate(pane + " return m.scrollTop; }") < page.evaluate(
        pane + " return m.scrollHeight - m.clientHeight - 1000; }"
    )
    after = {s: rect(page, s) for s in fixed}
    assert after == before
    assert page.evaluate("() => document.scrollingElement.scrollTop") == 0
    page.screenshot(path=f"/tmp/chat-layout-{width}-scrolled.png")


# -- 3. The phone: the drawer, tables, code blocks -------------------------------------------

TABLE = (
    "| configuration | documentation | internationalisation | responsibilities | "
    "administration | notifications |\\n|---|---|---|---|---|---|\\n"
    "| unbelievable | extraordinary | incomprehensible | misunderstanding | "
    "characteristically | uncharacteristically |"
)
CODE = (
    "```python\\nresult = compute_the_answer(first_argument, second_argument,"
    " third_argument, fourth_argument)\\nprint(result)\\n```"
)

WORDS_BROKEN = """() => {
  // Every word of every cell lies on one line (no word broken in the middle).
  const broken = [];
  for (const cell of document.querySelectorAll('#messages .md td, #messages .md th')) {
    const text = cell.firstChild;
    if (!text || text.nodeType !== Node.TEXT_NODE) continue;
    for (const m of text.data.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(text, m.index);
      range.setEnd(text, m.index + m[0].length);
      const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
      if (tops.size > 1) broken.push(m[0]);
    }
  }
  return broken;
}"""

COPY_OVER_CODE = """() => {
  // The Copy button's box against each visible line of the code.
  const box = document.querySelector('#messages .md .md-code');
  const button = box.querySelector('.md-copy').getBoundingClientRect();
  const code = box.querySelector('pre code');
  const range = document.createRange();
  range.selectNodeContents(code);
  const pre = box.querySelector('pre').getBoundingClientRect();
  return [...range.getClientRects()]
    .filter(r => r.width && r.right > pre.left && r.left < pre.right)
    .some(r => !(r.bottom <= button.top || r.top >= button.bottom
                 || r.right <= button.left || r.left >= button.right));
}"""


def test_on_a_phone_the_drawer_closes_tables_scroll_and_copy_covers_no_code(page, server):
    sized(page, 390)
    login(page, server)
    new_session(page)
    send(page, f"say {TABLE}\\n\\n{CODE}")
    page.wait_for_selector("#messages .md table")
    page.wait_for_selector("#messages .md pre code")
    wait_idle(page)
    sidebar = page.locator("#sidebar")
    toggle = page.locator("#sidebar-toggle")

    # -- the Sessions drawer: Escape, a tap outside, its Close button --------------------------
    toggle.click()
    sidebar.wait_for(state="visible")
    assert toggle.get_attribute("aria-expanded") == "true"
    page.keyboard.press("Escape")
    sidebar.wait_for(state="hidden")
    assert page.evaluate(FOCUSED) == "sidebar-toggle"
    assert toggle.get_attribute("aria-expanded") == "false"

    toggle.click()
    sidebar.wait_for(state="visible")
    box = sidebar.bounding_box()
    page.mouse.click(box["x"] + box["width"] + 20, 500)  # outside it
    sidebar.wait_for(state="hidden")

    toggle.click()
    sidebar.get_by_role("button", name="Close the session list").click()
    sidebar.wait_for(state="hidden")

    # -- never over the session menu: opening one closes the other -----------------------------
    page.click("#session-menu summary")
    page.wait_for_selector("#session-menu .menu-body", state="visible")
    toggle.click()
    sidebar.wait_for(state="visible")
    assert page.evaluate("() => document.getElementById('session-menu').open") is False
    page.keyboard.press("Escape")
    sidebar.wait_for(state="hidden")

    # -- the Files panel is a drawer too ------------------------------------------------------
    page.click("#files-toggle")
    files = page.locator("aside.files")
    files.wait_for(state="visible")
    page.keyboard.press("Escape")
    files.wait_for(state="hidden")

    # -- a wide table scrolls sideways; no word is broken in the middle ------------------------
    assert page.evaluate(WORDS_BROKEN) == []
    assert page.evaluate(
        "() => { const t = document.querySelector('#messages .md .md-table');"
        " return t.scrollWidth > t.clientWidth; }"
    )
    assert page.evaluate("() => document.scrollingElement.scrollWidth") <= 390

    # -- the code block's Copy button covers no code, scrolled or not --------------------------
    assert page.evaluate(COPY_OVER_CODE) is False
    page.evaluate(
        "() => { const p = document.querySelector('#messages .md pre');"
        " p.scrollLeft = (p.scrollWidth - p.clientWidth) / 2; }"
    )
    assert page.evaluate(COPY_OVER_CODE) is False
    page.locator("#messages .md .md-code").screenshot(path="/tmp/chat-code-390.png")


# -- 7. The connection -----------------------------------------------------------------------


def _cut_off(page):
    """Route the page's socket and API calls through a switch: ``cut(True)`` closes the
    socket and refuses every new one and every API call, as a server that is unreachable."""
    state = {"down": False, "sockets": []}

    def socket(ws) -> None:
        if state["down"]:
            ws.close()
            return
        ws.connect_to_server()
        state["sockets"].append(ws)

    def request(route) -> None:
        if state["down"]:
            route.abort()
        else:
            route.continue_()

    page.route_web_socket(re.compile(r"/ws/sessions/"), socket)
    page.route(re.compile(r"/api/"), request)

    def cut(down: bool) -> None:
        state["down"] = down
        if down:
            for ws in state["sockets"]:
                ws.close()
            state["sockets"].clear()

    return cut


@pytest.mark.parametrize("width", WIDTHS)
def test_an_unreachable_server_shows_reconnecting_and_a_send_keeps_its_text(page, server, width):
    sized(page, width)
    cut = _cut_off(page)
    login(page, server)
    new_session(page)
    send(page, "say before")
    answer(page, "before")

    cut(True)
    bar = page.locator("#connection-bar")
    bar.wait_for(state="visible")
    page.wait_for_function(
        "() => /Reconnecting… .*next try in \\d+ s/.test("
        "document.getElementById('connection-bar').textContent)"
    )
    assert page.locator("#status").inner_text() == "offline"  # not "idle"
    page.fill("#prompt", "say after")
    page.focus("#prompt")
    page.keyboard.press("Enter")
    error = page.locator("#error")
    error.wait_for(state="visible")
    assert "offline" in error.inner_text() and "not sent" in error.inner_text()
    assert page.input_value("#prompt") == "say after", "nothing is lost from the box"
    assert "Failed to fetch" not in page.locator("body").inner_text()
    page.screenshot(path=f"/tmp/chat-offline-{width}.png")

    # The chat's own next try at least 4 s away (its waits double: 1, 2, 4, 8 s): else it may
    # reconnect by itself between the server's return and the click, and the button is gone
    # (seen on a loaded machine).
    page.wait_for_function(
        "() => Number((/next try in (\\d+) s/.exec("
        "document.getElementById('connection-bar').textContent) || [0, 0])[1]) >= 4",
        timeout=20_000,
    )
    cut(False)
    page.get_by_role("button", name="Try now").click()
    bar.wait_for(state="hidden")
    error.wait_for(state="hidden")  # the refusal went with the reason for it
    wait_idle(page)
    page.focus("#prompt")
    page.keyboard.press("Enter")
    answer(page, "after")
    assert page.evaluate(USERS) == ["say before", "say after"]


# -- 8. A message while a run goes on --------------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
def test_while_a_run_goes_on_a_message_is_queued_or_sent_as_an_interruption(page, server, width):
    sized(page, width)
    login(page, server)
    new_session(page)
    send(page, "wait 30")
    page.locator("details.tool .state", has_text="running").wait_for(timeout=30_000)
    assert page.locator("#send").inner_text() == "Queue"
    interrupt = page.get_by_role("button", name="Interrupt and send")
    assert interrupt.is_visible()

    # Enter queues it behind the run: said under the box, nothing refused.
    page.fill("#prompt", "say queued one")
    page.focus("#prompt")
    page.keyboard.press("Enter")
    queued = page.locator("#queued")
    queued.wait_for(state="visible")
    assert "Queued" in queued.inner_text() and "queued one" in queued.inner_text()
    assert page.locator("#error").is_hidden()
    assert page.input_value("#prompt") == ""
    assert page.locator("#interrupt").bounding_box()["x"] + 40 < width
    page.screenshot(path=f"/tmp/chat-queued-{width}.png")

    # "Interrupt and send" stops the run; the queued message, then this one, follow.
    page.fill("#prompt", "say now")
    interrupt.click()
    page.wait_for_function(f"() => ({USERS})().length === 3", timeout=40_000)
    answer(page, "now")
    assert page.evaluate(USERS) == ["wait 30", "say queued one", "say now"]
    assert page.locator("#error").is_hidden()
    assert queued.is_hidden()
    state = page.locator("details.tool .state").first.inner_text()
    assert re.match(r"stopped|interrupted", state), state
    assert page.locator("#send").inner_text() == "Send"
    assert interrupt.is_hidden()


# -- 10. The keyboard ------------------------------------------------------------------------


def test_escape_closes_menus_a_message_is_one_tab_stop_and_focus_shows(page, server):
    login(page, server)
    new_session(page)
    for word in ("one", "two", "three"):
        send(page, f"say {word}")
        answer(page, word)
    page.locator("#messages .msg.assistant").last.locator(".regenerate").wait_for(state="attached")

    # -- Escape closes the ⋯ menu (and gives the focus back to it) and the compare dialog -----
    page.click("#session-menu summary")
    page.wait_for_selector("#session-menu .menu-body", state="visible")
    page.keyboard.press("Escape")
    page.wait_for_selector("#session-menu .menu-body", state="hidden")
    assert page.evaluate("() => document.activeElement.closest('#session-menu') !== null")
    last = page.locator("#messages .msg.assistant").last
    last.hover()
    last.get_by_role("button", name=re.compile("^Compare with")).click()
    page.locator("#compare").wait_for(state="visible")
    page.keyboard.press("Escape")
    page.locator("#compare").wait_for(state="hidden")

    # -- from the menu to the box: one Tab per message -----------------------------------------
    page.focus("#session-menu summary")
    messages = page.locator("#messages .msg").count()
    assert messages == 6
    tabs = 0
    while page.evaluate(FOCUSED) != "prompt" and tabs < 60:
        page.keyboard.press("Tab")
        tabs += 1
    assert tabs <= messages + 1, f"{tabs} Tabs to reach the box past {messages} messages"

    # -- inside a message's moves, the arrow keys --------------------------------------------
    page.keyboard.press("Shift+Tab")  # the last answer's moves
    bar = "document.activeElement.closest('[role=toolbar]')"
    assert page.evaluate(f"() => {bar} !== null")
    first = page.evaluate("() => document.activeElement.textContent")
    page.keyboard.press("ArrowRight")
    second = page.evaluate("() => document.activeElement.textContent")
    assert second != first and page.evaluate(f"() => {bar} !== null")
    assert last.locator(".moves").evaluate("e => getComputedStyle(e).opacity") == "1"
    # Visible focus: a solid outline at least 2 px wide around the focused move.
    outline = page.evaluate(
        "() => { const s = getComputedStyle(document.activeElement);"
        " return [s.outlineStyle, parseFloat(s.outlineWidth)]; }"
    )
    assert outline[0] == "solid" and outline[1] >= 2, outline
    page.keyboard.press("ArrowLeft")
    assert page.evaluate("() => document.activeElement.textContent") == first
    page.keyboard.press("End")
    page.keyboard.press("Tab")  # out of the bar, on to the next stop
    assert page.evaluate(f"() => {bar} === null")
    page.keyboard.press("Shift+Tab")  # back in: where the reader left it
    assert page.evaluate(f"() => {bar} !== null")
    page.screenshot(path="/tmp/chat-keyboard.png")
