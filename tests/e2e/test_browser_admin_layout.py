"""The admin's session list fits beside its filters in a 1280 × 800 window (nothing under the
filter sidebar, nothing cut off), and the app and the admin have a favicon that loads
(issue 17, items 4a and 4c)."""

from __future__ import annotations

import json
import urllib.request

import pytest

from .ui import login

pytestmark = pytest.mark.timeout(240)


def api(server, method: str, path: str, body: dict | None = None, token: str = "") -> dict:
    request = urllib.request.Request(
        f"{server.url}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"}
        | ({"Authorization": f"Token {token}"} if token else {}),
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read() or b"{}")


def some_sessions(server) -> None:
    """Sessions that fill every column: long titles, a shared one, a fork with a revert."""
    credentials = {"username": "demo", "password": "demo-password"}
    token = api(server, "POST", "/api/auth/token/", credentials)["token"]
    for i in range(2):
        title = f"A session with a rather long title, number {i}, to see how it wraps"
        sid = api(server, "POST", "/api/sessions/", {"title": title}, token)["id"]
        for script in ("write a.txt one\nwrite b.txt two", "write c.txt three"):
            body = {"messages": [{"role": "user", "content": script}], "wait": True}
            run = api(server, "POST", f"/api/sessions/{sid}/runs/", body, token)
            assert run["status"] == "completed", run
    api(server, "POST", f"/api/sessions/{sid}/share/", {}, token)
    fork = api(server, "POST", f"/api/sessions/{sid}/fork/", {}, token)["id"]
    messages = api(server, "GET", f"/api/sessions/{fork}/messages/", token=token)["results"]
    second = [m for m in messages if m["role"] == "user"][1]["id"]
    api(server, "POST", f"/api/sessions/{fork}/revert/", {"message_id": second}, token)


def test_the_session_list_fits_beside_the_filters_at_1280(page, embedded_server):
    server = embedded_server
    some_sessions(server)
    page.set_viewport_size({"width": 1280, "height": 800})
    login(page, server)
    page.goto(f"{server.url}/admin/sessions_app/session/")
    page.wait_for_selector("#result_list tbody tr")
    # The three made here, and any other file's on the server this process shares.
    assert page.locator("#result_list tbody tr").count() >= 3

    filters = page.locator("#changelist-filter").bounding_box()
    table = page.locator("#result_list").bounding_box()
    assert table["x"] + table["width"] <= filters["x"], (table, filters)
    # Nor is any of it cut off: its scrolling box shows it whole.
    assert page.evaluate(
        "() => { const r = document.querySelector('#changelist .results');"
        " return r.scrollWidth <= r.clientWidth; }"
    )
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280
    # What the dropped columns showed is still there: a pending revert, the lineage.
    rows = page.locator("#result_list tbody").inner_text()
    assert "revert pending" in rows and "fork of ses_" in rows


def favicon_of(page) -> tuple[int, str]:
    """The status and type of the page's icon, fetched as the browser would."""
    href = page.locator('link[rel="icon"]').get_attribute("href")
    assert href and href.startswith("/"), href
    origin = "/".join(page.url.split("/", 3)[:3])
    response = page.request.get(origin + href)
    return response.status, response.headers["content-type"]


@pytest.mark.parametrize("where", ["/", "/login/", "/admin/", "/admin/sessions_app/session/"])
def test_app_and_admin_pages_link_a_favicon_that_loads(page, embedded_server, where):
    if where != "/login/":
        login(page, embedded_server)
    page.goto(f"{embedded_server.url}{where}")
    assert favicon_of(page) == (200, "image/svg+xml")
