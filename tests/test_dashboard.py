"""Issue 18, the admin's Usage dashboard (runs_app/dashboard.py): its numbers equal the sum of
the messages' usage, page and CSV alike; a staff user who is not a superuser sees nothing of
another user's usage or runs; nobody but staff gets in; its queries do not grow with the data."""

from __future__ import annotations

import csv
import io
import json
import re
import warnings
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from runs_app import dashboard
from runs_app.models import Run
from sessions_app.models import Message
from sessions_app.services.sessions import create_session
from tests.conftest import client_for, new_session, run_turn
from tests.test_usage_api import calls_of

pytestmark = pytest.mark.django_db(transaction=True)

PAGE, CSV = "/admin/usage/", "/admin/usage/export.csv"
# $1 per input token and $2 per output token: costs read as token counts.
MODELS = [{"name": "scripted", "context_window": 50_000, "price": {"input": 1e6, "output": 2e6}}]
NOON = datetime(2025, 3, 14, 12, 0, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _priced(settings):
    settings.AGENT_MODELS = json.dumps(MODELS)


@pytest.fixture
def root(db) -> User:
    return User.objects.create_superuser("root", password="root-pw")


def browser(user: User | None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def message_sums(*users: User) -> dict[str, object]:
    """What the assistant messages of ``users``' sessions recorded: the truth to compare with."""
    tokens = [
        m.tokens
        for m in Message.objects.filter(session__owner__in=users, role="assistant")
        if m.tokens
    ]
    inp = sum(t.get("input_tokens", 0) for t in tokens)
    out = sum(t.get("output_tokens", 0) for t in tokens)
    return {
        "calls": len(tokens),
        "input_tokens": inp,
        "output_tokens": out,
        "tokens": inp + out,
        "cost_usd": sum(Decimal(str(t.get("cost_usd", 0))) for t in tokens),
    }


def page_totals(html: str) -> dict[str, object]:
    block = re.search(r'<dl class="usage-totals".*?</dl>', html, re.S)
    assert block, html
    found = dict(re.findall(r"<dt>([^<]+)</dt><dd data-value=\"([^\"]*)\"", block[0]))
    return {
        "calls": int(found["calls"]),
        "input_tokens": int(found["input tokens"]),
        "output_tokens": int(found["output tokens"]),
        "tokens": int(found["tokens"]),
        "cost_usd": Decimal(found["cost"]),
    }


def csv_rows(client: Client, query: str = "") -> list[dict[str, str]]:
    response = client.get(CSV + query)
    assert response.status_code == 200, response
    assert response["Content-Type"].startswith("text/csv")
    with warnings.catch_warnings():  # the sync test client reads the async stream whole
        warnings.filterwarnings("ignore", "StreamingHttpResponse must consume", Warning)
        text = b"".join(response).decode()
    return list(csv.DictReader(io.StringIO(text)))


def csv_sums(rows: list[dict[str, str]]) -> dict[str, object]:
    inp = sum(int(r["input_tokens"]) for r in rows)
    out = sum(int(r["output_tokens"]) for r in rows)
    return {
        "calls": len(rows),
        "input_tokens": inp,
        "output_tokens": out,
        "tokens": inp + out,
        "cost_usd": sum(Decimal(r["cost_usd"]) for r in rows),
    }


def some_turns(owner: User, outsider: User) -> tuple[str, str]:
    api, other = client_for(owner), client_for(outsider)
    first, second = new_session(api), new_session(api)
    run_turn(api, first, "write a.txt x\nsay done")
    run_turn(api, second, "say hello there, a longer answer to count")
    theirs = new_session(other, title="mallory's secret")
    run_turn(other, theirs, "write b.txt y\nwrite c.txt z\nsay theirs")
    return first, theirs


def test_it_shows_totals_equal_to_the_sum_of_the_messages_usage(owner, outsider, root):
    mine, theirs = some_turns(owner, outsider)
    expected = message_sums(owner, outsider)
    assert expected["calls"] == 5 and expected["cost_usd"] > 0
    client = browser(root)
    page = client.get(PAGE)
    assert page.status_code == 200
    html = page.content.decode()
    assert page_totals(html) == expected
    assert csv_sums(csv_rows(client)) == expected
    # Formatted for people, and each user's and session's share adds up.
    assert f"${expected['cost_usd']:,.4f}" in html and f"{expected['tokens']:,}" in html
    assert f"/admin/sessions_app/session/{mine}/change/" in html
    assert f"/admin/sessions_app/session/{theirs}/change/" in html
    # Each user's row links to the quota on their page; the groups' quotas are linked too.
    quota = f"/admin/auth/user/{owner.pk}/change/#quota-group"
    assert quota in html and "/admin/auth/group/" in html
    assert 'id="quota-group"' in client.get(quota.split("#")[0]).content.decode()
    rows = csv_rows(client)
    for user in (owner, outsider):
        theirs = [r for r in rows if r["username"] == user.username]
        assert csv_sums(theirs) == message_sums(user)
        row = re.search(rf">{user.username}</a></td>(.*?)</tr>", html, re.S)[1]
        assert f"{message_sums(user)['tokens']:,}" in row
        assert f"${message_sums(user)['cost_usd']:,.4f}" in row


def test_it_draws_the_days_as_svg_bars_without_inline_styles(owner, root):
    run_turn(client_for(owner), new_session(client_for(owner)), "say hi")
    html = browser(root).get(PAGE + "?stack=user").content.decode()
    assert html.count('<svg class="usage-chart"') == 2
    assert re.search(r'<rect class="bar"[^>]*><title>\d{4}-\d\d-\d\d · alice: ', html)
    assert "Tokens per day by user" in html and "Cost per day by user (USD)" in html
    assert " style=" not in html and "<script>" not in html.replace("<script src", "")


def test_a_staff_user_sees_only_their_own_usage_and_runs(owner, outsider):
    mine, theirs = some_turns(owner, outsider)
    failed = run_turn(client_for(outsider), theirs, "fail their secret failure", status="error")
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])
    client = browser(owner)
    html = client.get(PAGE).content.decode()
    assert page_totals(html) == message_sums(owner)
    for secret in (theirs, "mallory", failed["id"], "their secret failure"):
        assert secret not in html, secret
    assert mine in html and "Your own model calls" in html
    assert "/admin/auth/" not in html  # no quota links without the permission to edit them
    rows = csv_rows(client)
    assert {r["username"] for r in rows} == {"alice"}
    assert csv_sums(rows) == message_sums(owner)
    # Naming a group of the other user's does not widen the scope: it is not a choice.
    group = Group.objects.create(name="theirs")
    outsider.groups.add(group)
    refused = client.get(f"{PAGE}?group={group.pk}").content.decode()
    assert "Select a valid choice" in refused and "mallory" not in refused
    assert client.get(f"{CSV}?group={group.pk}").status_code == 400


def test_anonymous_and_non_staff_users_are_refused(owner):
    run_turn(client_for(owner), new_session(client_for(owner)), "say mine")
    for user in (None, owner):
        for url in (PAGE, CSV):
            response = browser(user).get(url)
            assert response.status_code == 302, (user, url)
            assert response["Location"].startswith("/admin/login/")


def test_the_lists_show_errors_live_runs_and_waiting_approvals(owner, root):
    api = client_for(owner)
    failed = run_turn(api, new_session(api), "fail it broke", status="error")
    waiting = run_turn(
        api, new_session(api, permissions={"write": "ask"}), "write a.txt x", "requires_action"
    )
    idle = create_session(owner=owner, title="busy")
    live = Run.objects.create(session=idle, status=Run.Status.RUNNING)
    html = browser(root).get(PAGE).content.decode()
    for run_id, table in ((failed["id"], "errors"), (live.id, "live"), (waiting["id"], "waiting")):
        section = re.search(rf'id="usage-{table}".*?</table>', html, re.S)[0]
        assert f'href="/admin/runs_app/run/{run_id}/change/"' in section, table
    assert "ProviderError: it broke" in html
    assert "/admin/runs_app/run/?waiting=yes" in html


def test_the_range_and_the_group_filter_what_is_counted(owner, outsider, root, monkeypatch):
    team = Group.objects.create(name="team")
    owner.groups.add(team)
    calls_of(owner, session="ses_a", model="m1", at=NOON, n=2)
    calls_of(owner, session="ses_a", model="m2", at=NOON + timedelta(days=1))
    calls_of(outsider, session="ses_b", model="m1", at=NOON)
    calls_of(owner, session="ses_a", model="m1", at=NOON + timedelta(days=40))
    monkeypatch.setattr(dashboard, "CSV_CHUNK", 2)  # 4 rows: the export reads 3 chunks
    client = browser(root)
    query = "?from=2025-03-14&to=2025-03-15"
    totals = page_totals(client.get(PAGE + query).content.decode())
    assert totals == {
        "calls": 4,
        "input_tokens": 40,
        "output_tokens": 20,
        "tokens": 60,
        "cost_usd": Decimal("1.00000000"),
    }
    in_team = f"{query}&group={team.pk}"
    assert page_totals(client.get(PAGE + in_team).content.decode())["calls"] == 3
    assert [r["username"] for r in csv_rows(client, in_team)] == ["alice"] * 3
    assert [r["created_at"][:10] for r in csv_rows(client, query)] == [
        "2025-03-14",
        "2025-03-14",
        "2025-03-14",
        "2025-03-15",
    ]
    # The days' bars hold the same numbers: 3 calls on the 14th (2 of m1 by alice, 1 of
    # mallory's), stacked by model.
    html = client.get(PAGE + query).content.decode()
    assert 'name="from" value="2025-03-14"' in html and 'name="to" value="2025-03-15"' in html
    assert "2025-03-14 · m1: 45</title>" in html and "2025-03-15 · m2: 15</title>" in html
    bad = client.get(PAGE + "?from=2025-03-15&to=2025-03-14").content.decode()
    assert "from must not be after to." in bad
    assert client.get(CSV + "?from=2024-01-01&to=2025-03-14").status_code == 400


def test_its_queries_do_not_grow_with_users_sessions_runs_or_days(owner, outsider, root):
    def count() -> int:
        client = browser(root)
        client.get(PAGE)  # the session and the user, fetched once
        with CaptureQueriesContext(connection) as queries:
            response = client.get(PAGE + "?stack=user")
        assert response.status_code == 200
        return len(queries)

    today = datetime.now(UTC)
    calls_of(owner, session="ses_a", model="m1", at=today)
    run_turn(client_for(owner), new_session(client_for(owner)), "fail once", status="error")
    few = count()
    for i in range(12):
        user = User.objects.create_user(f"user{i}")
        for day in range(3):
            calls_of(user, session=f"ses_{i}", model=f"m{i}", at=today - timedelta(days=day))
        session = create_session(owner=user, title=f"s{i}")
        Run.objects.create(session=session, status=Run.Status.ERROR, finished_at=today)
        Run.objects.create(session=session, status=Run.Status.RUNNING)
        Run.objects.create(session=session, status=Run.Status.REQUIRES_ACTION)
    many = count()
    assert many == few <= 16, (few, many)
