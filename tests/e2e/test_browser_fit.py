"""Issue 46, the layout points (1, 3, 8, 9, 10, 11, 13), in Chromium: every dialog and overlay
of the chat fits a 390 px phone with its close control on screen; a message's moves take a
row of their own (nothing of the next message under them) on one line; the session menu fits
an 800 px-tall window; native selects follow dark mode and the theme switch says its state;
the sessions page's boxes; the header of a session from a repository and the phone's header
on one row; a code block's Copy inside its block. Screenshots go to /tmp/fit-*.png."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .test_browser_admin_layout import api
from .ui import login, wait_idle

pytestmark = pytest.mark.timeout(300)

PHONE = {"width": 390, "height": 844}
DESK = {"width": 1280, "height": 800}
SIZES = [pytest.param(DESK, id="1280"), pytest.param(PHONE, id="390")]
FIRST = "write a.txt one\nwrite b.txt two\nsay ```python\\nprint('a code block')\\n```"
SECOND = "write c.txt three\nsay the second answer"


@pytest.fixture(scope="module")
def convo(server) -> str:
    """A session of two turns (tool calls, a code block, changed files): its chat's URL."""
    credentials = {"username": "demo", "password": "demo-password"}
    token = api(server, "POST", "/api/auth/token/", credentials)["token"]
    sid = api(server, "POST", "/api/sessions/", {"title": "fit"}, token)["id"]
    for script in (FIRST, SECOND):
        body = {"messages": [{"role": "user", "content": script}], "wait": True}
        run = api(server, "POST", f"/api/sessions/{sid}/runs/", body, token)
        assert run["status"] == "completed"
    # Two more answers to the last question: branches, for Compare's "with" selector.
    again = {"replace_original": False, "wait": True}
    for _ in range(2):
        api(server, "POST", f"/api/runs/{run['id']}/regenerate/", again, token)
    return f"{server.url}/sessions/{sid}/"


def open_chat(page, server, url: str, size: dict, scheme: str = "light") -> None:
    page.emulate_media(color_scheme=scheme)
    page.set_viewport_size(size)
    login(page, server)
    page.goto(url)
    page.wait_for_selector("#messages .md pre code")
    page.wait_for_selector("#messages .msg.assistant .tool")
    wait_idle(page)


def box(locator) -> dict:  # noqa: ANN001 - a Playwright Locator
    b = locator.bounding_box()
    assert b, f"{locator} is not shown"
    return b


def inside_viewport(page, locator, what: str) -> None:  # noqa: ANN001
    b, size = box(locator), page.viewport_size
    assert b["x"] >= -0.5 and b["x"] + b["width"] <= size["width"] + 0.5, (what, b)
    assert b["y"] >= -0.5 and b["y"] + b["height"] <= size["height"] + 0.5, (what, b)


def within_width(page, locator, what: str) -> None:  # noqa: ANN001
    b = box(locator)
    assert b["x"] >= -0.5 and b["x"] + b["width"] <= page.viewport_size["width"] + 0.5, (what, b)


def intersect(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["width"] - 0.5
        and b["x"] < a["x"] + a["width"] - 0.5
        and a["y"] < b["y"] + b["height"] - 0.5
        and b["y"] < a["y"] + a["height"] - 0.5
    )


def same_row(a: dict, b: dict) -> bool:
    """Vertical overlap of the two boxes: they sit on one row."""
    return a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]


# -- 1. every dialog and overlay fits a phone --------------------------------------------------
def test_every_dialog_and_overlay_fits_a_phone_with_its_close_control_visible(page, server, convo):
    open_chat(page, server, convo, PHONE)
    page.screenshot(path="/tmp/fit-chat-390.png")

    # The session menu (⋯), its Share box: the summary closes it.
    page.locator("#session-menu summary").click()
    body = page.locator("#session-menu .menu-body")
    within_width(page, body, "session menu")
    inside_viewport(page, page.locator("#session-menu summary"), "session menu's ⋯")
    page.locator("#share").click()
    page.locator("#share-box").wait_for()
    within_width(page, body, "session menu with the share box")
    inside_viewport(page, page.locator("#copy-share"), "share's Copy")
    page.screenshot(path="/tmp/fit-menu-390.png")
    page.locator("#session-menu summary").click()
    expect(body).to_be_hidden()

    # A message's rewind menu (↺ ▾): its toggle closes it.
    answer = page.locator("#messages .msg.assistant").first
    answer.click(position={"x": 5, "y": 5})
    answer.hover()
    toggle = answer.locator(":scope > .actions .rewind-toggle")
    toggle.click()
    menu = answer.locator(":scope > .actions .rewind-menu")
    expect(menu).to_be_visible()
    inside_viewport(page, menu, "rewind menu")
    inside_viewport(page, toggle, "rewind toggle")
    toggle.click()
    expect(menu).to_be_hidden()

    # Compare: the "with" selector and Close on screen, the dialog as wide as the window at most.
    branched = page.locator("#messages .msg.assistant", has=page.locator(".branches")).last
    branched.get_by_role("button", name="Compare the branches").click()
    dialog = page.locator("#compare")
    dialog.wait_for(state="visible")
    within_width(page, dialog, "compare")
    expect(dialog.locator("select").first).to_be_visible()
    within_width(page, dialog.locator("select").first, "compare's with selector")
    close = dialog.locator(".compare-head > button", has_text="Close")
    inside_viewport(page, close, "compare's Close")
    page.screenshot(path="/tmp/fit-compare-390.png")
    close.click()
    expect(dialog).to_be_hidden()

    # The drawers: the session list and the Files panel, with a file's view (blame) and a diff.
    page.locator("#sidebar-toggle").click()
    sidebar = page.locator("#sidebar")
    expect(sidebar).to_be_visible()
    within_width(page, sidebar, "session list")
    inside_viewport(page, sidebar.locator(".drawer-close"), "session list's Close")
    sidebar.locator(".drawer-close").click()
    expect(sidebar).to_be_hidden()

    page.locator("#files-toggle").click()
    panel = page.locator("#files-panel")
    expect(panel).to_be_visible()
    within_width(page, panel, "files panel")
    inside_viewport(page, panel.locator(".drawer-close"), "files panel's Close")
    panel.locator("#files li", has_text="a.txt").first.locator("button").first.click()
    viewer = page.locator("#file-view")
    expect(viewer).to_be_visible()
    page.wait_for_selector("#file-view pre.blamed .blame-gutter")
    within_width(page, viewer, "file viewer")
    viewer.locator(".viewer-close").scroll_into_view_if_needed()
    inside_viewport(page, viewer.locator(".viewer-close"), "file viewer's Close")
    page.screenshot(path="/tmp/fit-viewer-390.png")
    viewer.locator(".viewer-close").click()
    panel.locator("#changes li", has_text="c.txt").get_by_role("button").click()
    diff = page.locator("#diff-view")
    expect(diff).to_be_visible()
    within_width(page, diff, "diff viewer")
    diff.locator(".viewer-close").scroll_into_view_if_needed()
    inside_viewport(page, diff.locator(".viewer-close"), "diff viewer's Close")
    diff.locator(".viewer-close").click()
    panel.locator(".drawer-close").scroll_into_view_if_needed()
    panel.locator(".drawer-close").click()
    expect(panel).to_be_hidden()

    # Alternatives: the side-by-side view and its Close.
    first_user = page.locator("#messages .msg.user").first
    first_user.click(position={"x": 5, "y": 5})
    first_user.hover()
    first_user.get_by_role("button", name="Alternatives…: Run this turn again").click()
    page.locator("#alternatives-n").fill("2")
    page.locator("#alternatives-ask button", has_text="Start").click()
    view = page.locator("#alternatives-view")
    view.wait_for()
    within_width(page, view, "alternatives")
    view_close = view.get_by_role("button", name="Close the alternatives")
    inside_viewport(page, view_close, "alternatives' Close")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#alternatives-view .alt-col .badge')]"
        ".every(b => !b.classList.contains('busy'))",
        timeout=60_000,
    )
    page.screenshot(path="/tmp/fit-alternatives-390.png")
    view_close.click()
    expect(view).to_be_hidden()


# -- 3. a message's moves: a row of their own, on one line ------------------------------------
MOVES = """() => [...document.querySelectorAll('#messages .msg')].map((m, i, all) => {
  const moves = m.querySelector(':scope > .actions .moves');
  if (!moves || !moves.children.length) return null;
  const r = moves.getBoundingClientRect();
  const line = parseFloat(getComputedStyle(moves.querySelector('.act')).lineHeight) || 18;
  const next = all[i + 1];
  const others = [...m.querySelectorAll('.tool, .text'), ...(next ? [next] : [])]
    .map(e => e.getBoundingClientRect())
    .map(b => ({x: b.x, y: b.y, width: b.width, height: b.height}));
  return {i, box: {x: r.x, y: r.y, width: r.width, height: r.height}, line, others};
}).filter(Boolean)"""


@pytest.mark.parametrize("size", SIZES)
def test_a_messages_moves_take_their_own_row_on_one_line(page, server, convo, size):
    open_chat(page, server, convo, size)
    for message in page.locator("#messages .msg").all():
        message.hover()  # shows its moves, as a pointer does
        found = [m for m in page.evaluate(MOVES) if m["box"]["width"] > 0]
        hovered = [m for m in found if m["box"]["height"] > 0]
        for m in hovered:
            for other in m["others"]:
                assert not intersect(m["box"], other), (m["i"], m["box"], other)
            # one line: no wrapping of its labels onto two or three lines
            assert m["box"]["height"] <= 2.2 * m["line"], (m["i"], m["box"], m["line"])
    page.locator("#messages .msg.user").first.hover()
    page.screenshot(path=f"/tmp/fit-moves-{size['width']}.png")


# -- 8. the session menu in an 800 px-tall window ----------------------------------------------
def test_the_session_menu_fits_an_800_px_window(page, server, convo):
    open_chat(page, server, convo, DESK)
    page.locator("#session-menu summary").click()
    body = page.locator("#session-menu .menu-body")
    expect(body).to_be_visible()
    inside_viewport(page, page.locator("#share"), "Share")
    scroll = page.evaluate(
        "() => { const b = document.querySelector('#session-menu .menu-body');"
        " return [b.scrollHeight, b.clientHeight]; }"
    )
    assert scroll[0] <= scroll[1] + 1, f"the menu scrolls inside: {scroll}"
    inside_viewport(page, body, "session menu")
    # "Include the system prompt": the box beside its words.
    check = box(page.locator("#share-system-prompt"))
    words = page.evaluate(
        "() => { const l = document.getElementById('share-system-prompt').closest('label');"
        " const r = document.createRange(); r.selectNodeContents(l);"
        " const t = [...r.getClientRects()].filter(b => b.width > 20);"
        " const b = t[t.length - 1]; return {x: b.x, y: b.y, width: b.width, height: b.height}; }"
    )
    assert same_row(check, words), (check, words)
    assert check["width"] < 30, check
    # The push result (a session from a repository) is said in the menu: the page stays put.
    page.evaluate(
        "() => { document.getElementById('push-box').hidden = false;"
        " document.getElementById('push-result').textContent ="
        " 'Pushed 0123456789ab to agent/a-long-branch-name at https://example.com/o/r.git'; }"
    )
    page.locator("#push").focus()
    for scroller in (
        "document.scrollingElement",
        "document.body",
        "document.querySelector('main')",
    ):
        assert page.evaluate(f"() => {scroller}.scrollTop") == 0, scroller
    inside_viewport(page, page.locator("#share"), "Share, with the push box shown")
    page.screenshot(path="/tmp/fit-menu-1280.png")


# -- 9. dark mode: native selects and the theme switch's state ---------------------------------
def test_native_selects_follow_dark_mode_and_the_switch_says_its_state(page, server, convo):
    open_chat(page, server, convo, DESK, scheme="dark")
    scheme = "(s) => getComputedStyle(document.querySelector(s)).colorScheme"
    assert page.evaluate(scheme, "#model-picker") == "dark"
    page.locator("#session-menu summary").click()
    page.locator("#permissions select").first.wait_for()
    assert page.evaluate(scheme, "#permissions select") == "dark"
    page.screenshot(path="/tmp/fit-dark-1280.png")
    switch = page.locator("#theme-switch")
    expect(switch).to_have_attribute("data-choice", "auto")
    expect(switch).to_contain_text("auto (on)")
    switch.click()  # light, against the browser
    expect(switch).to_have_attribute("data-choice", "light")
    expect(switch).to_have_attribute("aria-pressed", "false")
    expect(switch.locator(".theme-state")).to_have_text("off")
    assert page.evaluate(scheme, "#model-picker") == "light"
    switch.click()  # the browser's again
    expect(switch).to_have_attribute("data-choice", "auto")


# -- 10. the sessions page ---------------------------------------------------------------------
def test_the_sessions_page_boxes(page, server):
    page.set_viewport_size(DESK)
    login(page, server)
    new = box(page.locator("#new-session"))
    line = page.evaluate(
        "() => parseFloat(getComputedStyle(document.getElementById('new-session')).lineHeight)"
    )
    assert new["height"] <= line * 1.5 + 16, f"New session wraps: {new}, line {line}"
    page.locator("#new-from summary").click()
    row = box(page.locator("#clone-url").locator("xpath=.."))
    url, ref = box(page.locator("#clone-url")), box(page.locator("#clone-ref"))
    assert url["width"] >= 0.6 * row["width"], (url, row)
    assert ref["width"] <= 0.25 * row["width"], (ref, row)
    form, file = box(page.locator("#import-form")), box(page.locator("#import-file"))
    assert file["width"] <= 0.5 * form["width"], (
        "the file box is sized to its content",
        file,
        form,
    )
    page.screenshot(path="/tmp/fit-sessions-1280.png", full_page=True)

    page.set_viewport_size(PHONE)
    for part in ("#import-form", "#import-file", "#import-session", "#import-form label"):
        within_width(page, page.locator(part), part)
    label = box(page.locator("#import-form label"))
    assert label["width"] >= 150, f"the Import label squeezed: {label}"
    page.screenshot(path="/tmp/fit-sessions-390.png", full_page=True)
    assert page.evaluate(OFF_SCREEN, PHONE["width"]) == []


OFF_SCREEN = """(width) => [...document.querySelectorAll('body *')]
  .filter(e => e.getClientRects().length)
  .map(e => [e, e.getBoundingClientRect()])
  .filter(([e, r]) => r.width > 0 && (r.left < -0.5 || r.right > width + 0.5))
  .map(([e, r]) => `${e.tagName}#${e.id}.${e.className}: ${r.left}-${r.right}`)"""


# -- 11, 13. the head on one row; the phone's header; Copy in its block ------------------------
@pytest.mark.parametrize("size", SIZES)
def test_the_head_of_a_session_from_a_repository_keeps_its_row(page, server, convo, size):
    open_chat(page, server, convo, size)
    # The line repository.js writes for a cloned session.
    page.evaluate(
        "() => { const s = document.getElementById('source'); s.hidden = false;"
        " s.textContent = '⎇ https://git.example.com/someone/a-repository-with-a-long-name.git"
        " (main) @ 0123456789ab'; }"
    )
    title = box(page.locator(".chat-head h1"))
    for part in ("#model-picker", "#session-menu summary"):
        assert same_row(title, box(page.locator(part))), (part, title, box(page.locator(part)))
        within_width(page, page.locator(part), part)
    within_width(page, page.locator("#source"), "source")
    page.screenshot(path=f"/tmp/fit-head-{size['width']}.png")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_phone_header_is_one_line_and_copy_is_inside_its_block(page, server, convo, scheme):
    open_chat(page, server, convo, PHONE, scheme=scheme)
    header = page.locator("header.top")
    brand = box(header.locator(".brand"))
    for part in header.locator(":scope > *:visible").all():
        b = box(part)
        assert same_row(brand, b), ("header on one line", brand, b)
        assert b["x"] + b["width"] <= PHONE["width"] + 0.5, b
    assert box(header)["height"] <= 56, box(header)
    # The block is the box that draws its border: the Copy button within it, not on a tab
    # above it.
    code = page.locator("#messages .md .md-code").first
    framed = "(e) => parseFloat(getComputedStyle(e).borderTopWidth) > 0"
    block = box(code if code.evaluate(framed) else code.locator("pre"))
    copy = box(code.locator(".md-copy"))
    assert copy["x"] >= block["x"] and copy["x"] + copy["width"] <= block["x"] + block["width"]
    assert copy["y"] >= block["y"] and copy["y"] + copy["height"] <= block["y"] + block["height"]
    page.screenshot(path=f"/tmp/fit-phone-{scheme}.png")
