"""Issue 46, point 7, in Chromium: the header's "Usage" link opens the user's own usage page,
at 1280 and 390 px, light and dark, with everything on it inside the window (no element's box
past the right edge, no sideways scrolling), its charts drawn and its limits listed.
Screenshots go to /tmp/usage-<width>-<scheme>.png."""

from __future__ import annotations

import pytest

from .test_browser_a11y import _violations
from .test_browser_admin_layout import api
from .ui import login

pytestmark = pytest.mark.timeout(240)

WIDTHS = [pytest.param(1280, id="1280px"), pytest.param(390, id="390px")]
# The boxes of everything the page shows, wider than the window or past its right edge.
# (The header's other links are point 13's, tests/e2e/test_browser_fit.py: here its Usage link.)
OFF_SCREEN = """(width) => [...document.querySelectorAll('#usage-link, #usage-page *')]
  .filter(e => e.getClientRects().length && !e.closest('svg *'))
  .map(e => [e, e.getBoundingClientRect()])
  .filter(([e, r]) => r.width > 0 && (r.left < -0.5 || r.right > width + 0.5))
  .map(([e, r]) => `${e.tagName}#${e.id}: ${r.left}-${r.right}`)"""


@pytest.fixture(scope="module")
def demo_usage(server):
    """A turn of the demo user (the scripted model: $0), so the page has a day to draw."""
    credentials = {"username": "demo", "password": "demo-password"}
    token = api(server, "POST", "/api/auth/token/", credentials)["token"]
    sid = api(server, "POST", "/api/sessions/", {"title": "usage"}, token)["id"]
    body = {"messages": [{"role": "user", "content": "say Counted."}], "wait": True}
    assert api(server, "POST", f"/api/sessions/{sid}/runs/", body, token)["status"] == "completed"
    return server


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_header_link_opens_the_usage_page_inside_the_window(page, demo_usage, width, scheme):
    server = demo_usage
    page.emulate_media(color_scheme=scheme)
    page.set_viewport_size({"width": width, "height": 900 if width > 800 else 844})
    login(page, server)
    link = page.locator("#usage-link")
    box = link.bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= width, box
    link.click()
    page.wait_for_url("**/usage/")
    assert page.evaluate("() => document.documentElement.dataset.theme") == scheme
    page.locator("#usage-page h1").wait_for()

    assert int(page.locator("#usage-calls").get_attribute("data-value")) >= 1
    assert int(page.locator("#usage-runs").get_attribute("data-value")) >= 1
    charts = page.locator("svg.usage-chart:visible")  # the wide or the narrow ones
    assert charts.count() == 3
    for i in range(3):
        drawn = charts.nth(i).bounding_box()
        assert drawn and drawn["width"] > width * 0.6 and drawn["height"] > 80, drawn
    assert charts.first.locator("rect.bar").count() >= 1
    assert page.locator("#usage-quotas li").count() == 6

    assert page.evaluate(OFF_SCREEN, width) == []
    assert page.evaluate("() => document.scrollingElement.scrollWidth") <= width
    assert _violations(page, server, f"usage {width} {scheme}") == []  # axe: none serious
    page.screenshot(path=f"/tmp/usage-{width}-{scheme}.png", full_page=True)
