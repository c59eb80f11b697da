"""The admin's Usage dashboard in Chromium (issue 18): reached from the admin's header, its
SVG charts render (bars drawn, sized, no console error and so no Content-Security-Policy
violation), its totals equal its CSV export's, and a screenshot at 1280 px goes to
/tmp/dashboard.png (DASHBOARD_SCREENSHOT=docs/dashboard.png refreshes the README's)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
import uuid
from decimal import Decimal
from pathlib import Path

import pytest

from tests.support.embedded_server import EmbeddedServer

from .test_browser_admin_layout import api
from .ui import login

pytestmark = pytest.mark.timeout(300)
OWN_SERVER = True  # usage history of the demo user (conftest.py: not the shared server)

# A run of the suite must not change the checkout: the picture goes to /tmp unless asked for
# (DASHBOARD_SCREENSHOT=docs/dashboard.png refreshes the README's).
SCREENSHOT = Path(os.environ.get("DASHBOARD_SCREENSHOT", "/tmp/dashboard.png"))
MODELS = [
    {"name": "scripted", "price": {"input": 3.0, "output": 15.0}},
    {"name": "openai:gpt-4o-mini", "price": {"input": 0.15, "output": 0.6}},
    {"name": "anthropic:claude-sonnet-4", "price": {"input": 3.0, "output": 15.0}},
]
# A month of history of three more users on three models, as the run engine records it
# (quotas_app.services.record_usage), so that the charts have something to stack.
HISTORY = """
from datetime import timedelta
from django.contrib.auth.models import Group, User
from quotas_app import clock
from quotas_app.services import record_usage, usage_record
from sessions_app.services.sessions import create_session
team = Group.objects.create(name="research")
TOPICS = ("Quarterly report draft", "Refactor the billing module", "Trip planning",
          "Literature review")
now = clock.now()
records = []
for u, name in enumerate(("bob", "carol", "dave")):
    user = User.objects.create_user(name, password=name + "-pw")
    if name != "dave":
        user.groups.add(team)
    sessions = [create_session(owner=user, title=f"{topic} ({name})").id for topic in TOPICS]
    for day in range(30):
        for m, (model, inp, out, price_in, price_out) in enumerate((
            ("openai:gpt-4o-mini", 9000, 1800, 0.15, 0.6),
            ("anthropic:claude-sonnet-4", 5000, 1200, 3.0, 15.0),
            ("scripted", 1500, 300, 3.0, 15.0),
        )):
            if (day + u + m) % (3 + m) == 0:
                continue
            scale = 1 + (day * 7 + u * 3 + m) % 5
            usage = {"input_tokens": inp * scale, "output_tokens": out * scale}
            usage["cost_usd"] = (usage["input_tokens"] * price_in
                                 + usage["output_tokens"] * price_out) / 1e6
            record = usage_record(user_id=user.pk, session_id=sessions[day % 4],
                                  run_id="run_seed", message_id=f"msg_{day}_{m}",
                                  model=model, usage=usage)
            record.created_at = now - timedelta(days=day, hours=u + m)
            records.append(record)
record_usage(records)
"""


@pytest.fixture(scope="module")
def priced_server():
    """Embedded mode with priced models, so that the scripted turns cost something."""
    tmp = Path(tempfile.mkdtemp(prefix=f"agentplat-dash-{uuid.uuid4().hex[:6]}-"))
    server = EmbeddedServer(tmp, AGENT_MODELS=json.dumps(MODELS))
    try:
        server.start()
        server.manage("shell", "-c", HISTORY)
        yield server
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def demo_turns(server) -> None:
    """The demo user's own turns: completed, failed, waiting for an approval and running."""
    credentials = {"username": "demo", "password": "demo-password"}
    token = api(server, "POST", "/api/auth/token/", credentials)["token"]

    def turn(script: str, wait: bool = True, **session: object) -> dict:
        sid = api(server, "POST", "/api/sessions/", {"title": script[:30], **session}, token)["id"]
        body = {"messages": [{"role": "user", "content": script}], "wait": wait}
        return api(server, "POST", f"/api/sessions/{sid}/runs/", body, token)

    assert turn("write notes.md plan\nsay Planned the trip")["status"] == "completed"
    assert turn("say A longer answer, to cost a little more")["status"] == "completed"
    assert turn("fail The provider timed out")["status"] == "error"
    waiting = turn("write a.txt x", permissions={"write": "ask"})
    assert waiting["status"] == "requires_action"
    assert turn("wait 120", wait=False)["status"] in ("pending", "running")


def test_the_dashboard_draws_its_charts_in_chromium(page, priced_server):
    server = priced_server
    demo_turns(server)
    page.set_viewport_size({"width": 1280, "height": 900})
    login(page, server)
    page.goto(f"{server.url}/admin/")
    page.get_by_role("link", name="Usage", exact=True).click()
    page.wait_for_url("**/admin/usage/")

    charts = page.locator("svg.usage-chart")
    assert charts.count() == 2
    for i in range(2):
        box = charts.nth(i).bounding_box()
        assert box and box["width"] > 600 and box["height"] > 150, box
        bars = charts.nth(i).locator("rect.bar")
        assert bars.count() > 30
        drawn = bars.first.bounding_box()
        assert drawn and drawn["width"] > 1 and drawn["height"] > 0, drawn
    legend = page.locator(".usage-legend").first.inner_text()
    assert "openai:gpt-4o-mini" in legend and "scripted" in legend
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280

    # The numbers: the totals are those of the CSV export of the same range.
    href = page.get_by_role("link", name="Export CSV").get_attribute("href")
    export = page.request.get(f"{server.url}{href}")
    assert export.ok and export.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(export.text())))
    tokens = sum(int(r["input_tokens"]) + int(r["output_tokens"]) for r in rows)
    cost = sum(Decimal(r["cost_usd"]) for r in rows)
    shown = page.locator("#usage-total-tokens")
    assert int(shown.get_attribute("data-value")) == tokens
    assert shown.inner_text() == f"{tokens:,}"
    assert Decimal(page.locator("#usage-total-cost").get_attribute("data-value")) == cost
    assert {r["username"] for r in rows} == {"demo", "bob", "carol", "dave"}

    for table in ("usage-errors", "usage-live", "usage-waiting", "usage-sessions"):
        assert page.locator(f"#{table} tbody a").count() >= 1, table
    page.screenshot(path=str(SCREENSHOT), full_page=True)

    # By user, for one group: the bars stack the group's members.
    page.select_option("select[name=group]", label="research")
    page.select_option("select[name=stack]", value="user")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url("**/admin/usage/?*group=*")
    legend = page.locator(".usage-legend").first.inner_text()
    assert "bob" in legend and "carol" in legend and "dave" not in legend
