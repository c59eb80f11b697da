"""Issue 12.4 in the browser: a long session opens on its newest page and loads older ones as
the reader scrolls up; a cut part shows whole on request."""

from __future__ import annotations

import pytest

from .ui import login, wait_idle

pytestmark = pytest.mark.timeout(180)
OWN_SERVER = True  # seeded history of the demo user (conftest.py: not the shared server)

COUNT = "() => document.querySelectorAll('#messages .msg').length"
USER_TEXTS = (
    "() => [...document.querySelectorAll('#messages .msg.user .text')].map(e => e.textContent)"
)


def test_a_long_chat_opens_on_its_last_page_and_scrolls_back(page, server):
    out = server.manage("seed_history", "--user", "demo", "--runs", "70", "--title", "long one")
    sid = out.split(":")[0].strip()
    login(page, server)
    page.goto(f"{server.url}/sessions/{sid}/")
    wait_idle(page)
    page.wait_for_function(f"() => ({COUNT})() > 0")
    first = page.evaluate(COUNT)
    assert 0 < first <= 50, first  # 210 messages in all; the newest page only
    texts = page.evaluate(USER_TEXTS)
    assert texts[-1].startswith("Question 69:"), texts[-1:]
    page.get_by_role("button", name="Show earlier messages").wait_for()
    # Scrolling the conversation up to the top loads the older pages, one after the other.
    for _ in range(20):
        page.evaluate("() => { document.getElementById('messages').scrollTop = 0; }")
        page.wait_for_timeout(300)
        if page.evaluate("() => !document.getElementById('load-older')"):
            break
    assert page.evaluate(COUNT) == 210
    texts = page.evaluate(USER_TEXTS)
    assert texts[0].startswith("Question 0:") and texts[-1].startswith("Question 69:")
    assert len(texts) == 70
