"""Compare's per-call Apply, as a new user saw it (issue 46's trial): the button stood glued to
the call's text ('…"from-x"}Apply b.txt to current branch'); it stands apart from it, and what
it did is said on a line of its own."""

from __future__ import annotations

import pytest

from .test_browser_admin_layout import api
from .ui import login, wait_idle

pytestmark = pytest.mark.timeout(180)

# The gap between the end of the call's text and its Apply button, or None when the button
# went to a line of its own.
GAP = """(row) => {
  const range = document.createRange();
  range.selectNodeContents(row.firstChild);
  const rects = range.getClientRects(), text = rects[rects.length - 1];
  const b = row.querySelector('.apply-step').getBoundingClientRect();
  return b.top >= text.bottom - 1 ? null : b.left - text.right;
}"""


def test_a_calls_apply_stands_apart_from_its_text(page, server):  # noqa: ANN001
    credentials = {"username": "demo", "password": "demo-password"}
    token = api(server, "POST", "/api/auth/token/", credentials)["token"]
    sid = api(server, "POST", "/api/sessions/", {"title": "gap"}, token)["id"]

    def run(script: str) -> dict:
        body = {"messages": [{"role": "user", "content": script}], "wait": True}
        return api(server, "POST", f"/api/sessions/{sid}/runs/", body, token)

    base = run("write a.txt base")
    run("Branch X\nwrite b.txt from-x")
    again = {"input": "Branch Y\nwrite c.txt from-y", "wait": True}
    api(server, "POST", f"/api/runs/{base['id']}/continue/", again, token)

    login(page, server)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{server.url}/sessions/{sid}/")
    wait_idle(page)
    branched = page.locator("#messages .msg", has=page.locator(".branches")).last
    branched.click(position={"x": 5, "y": 5})
    branched.get_by_role("button", name="Compare the branches").click()
    row = page.locator("#compare .compare-msg .tool", has=page.locator(".apply-step")).first
    row.wait_for()
    gap = row.evaluate(GAP)
    assert gap is None or gap >= 6, gap
    row.locator(".apply-step").click()
    note = row.locator(".apply-note")
    note.wait_for()
    assert "applied: b.txt" in note.inner_text()
    # What it did, under the call rather than after the button.
    assert note.bounding_box()["y"] >= row.locator(".apply-step").bounding_box()["y"] + 10
    page.screenshot(path="/tmp/compare-apply-gap.png")


def test_no_file_differs_ends_the_dialog_with_room_under_it(page, server):  # noqa: ANN001
    """Two answers that changed the same files: the dialog said "No file differs." over an
    empty list's border, flush with its bottom edge, as if cut."""
    credentials = {"username": "demo", "password": "demo-password"}
    token = api(server, "POST", "/api/auth/token/", credentials)["token"]
    sid = api(server, "POST", "/api/sessions/", {"title": "same"}, token)["id"]
    body = {"messages": [{"role": "user", "content": "write a.txt one\nsay same"}], "wait": True}
    run = api(server, "POST", f"/api/sessions/{sid}/runs/", body, token)
    again = {"replace_original": False, "wait": True}
    api(server, "POST", f"/api/runs/{run['id']}/regenerate/", again, token)

    login(page, server)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{server.url}/sessions/{sid}/")
    wait_idle(page)
    branched = page.locator("#messages .msg", has=page.locator(".branches")).last
    branched.click(position={"x": 5, "y": 5})
    branched.get_by_role("button", name="Compare the branches").click()
    files = page.locator("#compare .compare-files")
    files.wait_for()
    assert files.locator("h3").inner_text() == "No file differs."
    assert not files.locator(".compare-file-list").is_visible()
    dialog = page.locator("#compare").bounding_box()
    box = files.bounding_box()
    assert dialog["y"] + dialog["height"] - (box["y"] + box["height"]) >= 8, (dialog, box)
    page.screenshot(path="/tmp/compare-no-file-differs.png")
