"""Issue 46, point 7: usage. The admin's dashboard says what there was when the model calls
cost nothing ("36 calls, … tokens, no cost recorded") and "No model calls" only when there
were none; its By user / By model tables name each column once. Each user has a page of
their own usage (``/usage/``, linked from the header): tokens, cost and runs per day, their
limits and how much of each is used; only their own numbers; a bounded number of queries."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.test import Client

from quotas_app.models import Quota, UsageCounter, UsageRecord
from runs_app.models import Run
from sessions_app.services.sessions import create_session

pytestmark = pytest.mark.django_db

PAGE, ADMIN = "/usage/", "/admin/usage/"


def today_at(hour: int, days_ago: int = 0) -> datetime:
    now = datetime.now(UTC)
    return datetime(now.year, now.month, now.day, hour, tzinfo=UTC) - timedelta(days=days_ago)


def calls(user: User, *specs: tuple[int, int, int, str]) -> None:
    """Model calls of ``user``: (days ago, input, output, cost) each, at 01:00 UTC."""
    UsageRecord.objects.bulk_create(
        UsageRecord(
            user=user,
            session_id="ses_x",
            run_id=f"run_{i}",
            model="scripted",
            input_tokens=inp,
            output_tokens=out,
            cost_usd=Decimal(cost),
            created_at=today_at(1, days_ago),
        )
        for i, (days_ago, inp, out, cost) in enumerate(specs)
    )


def runs(user: User, *days_ago: int) -> None:
    session = create_session(owner=user, title="s")
    for ago in days_ago:
        run = Run.objects.create(session=session, status=Run.Status.COMPLETED)
        Run.objects.filter(pk=run.pk).update(created_at=today_at(2, ago))


def browser(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def root() -> User:
    return User.objects.create_superuser("root", password="root-pw")


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice", password="alice-pw")


@pytest.fixture
def bob() -> User:
    return User.objects.create_user("bob", password="bob-pw")


def chart(html: str, title: str) -> str:
    found = re.search(rf'aria-label="{re.escape(title)}".*?</svg>', html, re.S)
    assert found, f"no chart {title!r}"
    return found[0]


# -- the admin's dashboard ----------------------------------------------------------------
def test_the_admin_cost_chart_says_what_calls_there_were_when_they_cost_nothing(root, alice):
    calls(alice, *[(i % 3, 300, 50, "0") for i in range(36)])
    html = browser(root).get(ADMIN).content.decode()
    cost = chart(html, "Cost per day by model (USD)")
    assert "No model calls in this range" not in cost
    said = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", cost))
    assert "36 calls, 12,600 tokens, no cost recorded (the models are priced at $0)" in said
    # The tokens are drawn: one bar per day that had calls.
    assert chart(html, "Tokens per day by model").count('class="bar"') == 3


def test_the_admin_charts_say_no_model_calls_only_when_there_were_none(root):
    html = browser(root).get(ADMIN).content.decode()
    assert "No model calls in this range" in chart(html, "Cost per day by model (USD)")
    assert "no cost recorded" not in html


def test_the_by_user_and_by_model_headers_name_each_column_once(root, alice):
    calls(alice, (0, 10, 5, "0.5"))
    html = browser(root).get(ADMIN).content.decode()
    for table in ("usage-by-user", "usage-by-model"):
        head = re.search(rf'id="{table}">\s*<thead>(.*?)</thead>', html, re.S)[1]
        names = [
            re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<th[^>]*>.*?</th>", head)
        ]
        assert len(names) == len(set(names)), names
        assert names[1:] == ["calls", "tokens", "cost (USD)"], names
        # The number and its bar share one heading: the header spans the body's columns.
        spans = sum(int(n) for n in re.findall(r'colspan="(\d)"', head)) + names.count("calls") + 1
        assert spans == 6


# -- the user's own page ------------------------------------------------------------------
def test_the_header_links_to_the_users_own_usage_page(alice):
    html = browser(alice).get("/").content.decode()
    assert re.search(r'<a class="link" id="usage-link" href="/usage/">Usage</a>', html)


def test_the_page_needs_a_login():
    answer = Client().get(PAGE)
    assert answer.status_code == 302 and "/login/" in answer["Location"]


def number(html: str, id_: str) -> str:
    return re.search(rf'id="{id_}" data-value="([^"]*)"', html)[1]


def test_the_page_shows_the_users_tokens_cost_and_runs_per_day(alice):
    calls(alice, (0, 1000, 200, "0.25"), (0, 500, 100, "0.125"), (3, 70, 30, "0.01"))
    calls(alice, (45, 9999, 9999, "9"))  # before the default 30 days: not counted
    runs(alice, 0, 0, 3, 5)
    html = browser(alice).get(PAGE).content.decode()
    assert number(html, "usage-calls") == "3"
    assert number(html, "usage-input") == "1570"
    assert number(html, "usage-output") == "330"
    assert Decimal(number(html, "usage-cost")) == Decimal("0.385")
    assert number(html, "usage-runs") == "4"
    table = re.search(r"<tbody>.*?</tbody>", html[html.index('id="usage-days"') :], re.S)[0]
    rows = [
        [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)
    ]
    day = lambda ago: f"{today_at(0, ago):%Y-%m-%d}"  # noqa: E731
    assert rows == [
        [day(0), "2", "2", "1,500", "300", "$0.3750"],
        [day(3), "1", "1", "70", "30", "$0.0100"],
        [day(5), "1", "0", "0", "0", "$0.0000"],
    ]
    assert chart(html, "Tokens per day").count('class="bar"') == 4  # input and output, 2 days
    assert chart(html, "Cost per day (USD)").count('class="bar"') == 2
    assert chart(html, "Runs per day").count('class="bar"') == 3
    ticks = re.findall(r'text-anchor="end"[^>]*>([^<]+)<', chart(html, "Runs per day"))
    assert ticks == ["0", "1", "2", "3", "4"]  # whole runs up the side, not 0.25 of one
    # A range of the user's choosing: the older call counted, the rest not.
    html = browser(alice).get(PAGE, {"from": f"{today_at(0, 50):%Y-%m-%d}", "to": day(40)})
    assert number(html.content.decode(), "usage-calls") == "1"


def test_calls_that_cost_nothing_are_said_on_the_users_page(alice):
    calls(alice, (0, 100, 20, "0"), (1, 100, 20, "0"))
    html = browser(alice).get(PAGE).content.decode()
    cost = chart(html, "Cost per day (USD)")
    assert "2 calls, 240 tokens," in cost and "priced at $0" in cost
    assert "No run started in this range." in chart(html, "Runs per day")


def test_another_users_numbers_never_appear(alice, bob):
    calls(alice, (0, 111, 22, "0.5"))
    calls(bob, (0, 987654, 123456, "77.7777"), (1, 4444, 3333, "0"))
    runs(bob, 0, 1, 1)
    Quota.objects.create(user=bob, tokens_per_day=5_555_555)
    html = browser(alice).get(PAGE).content.decode()
    assert number(html, "usage-calls") == "1" and number(html, "usage-runs") == "0"
    for foreign in ("987", "123,456", "4,444", "77.77", "5,555,555", "bob"):
        assert foreign not in html, foreign
    # No parameter names another user: ?user= is not read.
    assert browser(alice).get(PAGE, {"user": "bob"}).content.decode().count("987") == 0


def quota(html: str, name: str) -> str:
    found = re.search(rf'data-quota="{name}">(.*?)</li>', html, re.S)
    return re.sub(r"\s+", " ", found[1])


def test_the_users_limits_are_shown_with_what_is_used_of_them(alice, settings):
    settings.SESSIONS_PER_USER_MAX = 10
    settings.QUOTA_TOKENS_PER_DAY = 0
    Quota.objects.create(user=alice, tokens_per_day=10_000, cost_per_month=Decimal("2"))
    UsageCounter.objects.create(
        user=alice, period="day", start=today_at(0).date(), input_tokens=8000, output_tokens=500
    )
    UsageCounter.objects.create(
        user=alice,
        period="month",
        start=today_at(0).date().replace(day=1),
        cost_usd=Decimal("0.5"),
    )
    runs(alice, 0)  # one session, one run
    html = browser(alice).get(PAGE).content.decode()
    tokens = quota(html, "tokens_per_day")
    assert "8,500 of 10,000" in tokens and 'aria-label="85.0% used"' in tokens
    assert "your own limit" in tokens and "resets" in tokens
    assert 'class="quota near"' in html  # 85 %: the bar warns
    cost = quota(html, "cost_per_month")
    assert "$0.5000 of $2.0000" in cost and 'aria-label="25.0% used"' in cost
    sessions = quota(html, "sessions")
    assert "1 of 10" in sessions and "default limit" in sessions
    assert "unlimited" in quota(html, "runs_per_minute")
    assert "quota-bar" not in quota(html, "runs_per_minute")


def test_the_pages_queries_do_not_grow_with_days_calls_or_runs(
    alice, django_assert_max_num_queries
):
    client = browser(alice)
    Quota.objects.create(user=alice, runs_per_minute=5, tokens_per_day=10**6)
    calls(alice, (0, 1, 1, "0"))
    runs(alice, 0)
    with django_assert_max_num_queries(12) as few:
        client.get(PAGE)
    calls(alice, *[(d, 10, 10, "0.01") for d in range(30) for _ in range(3)])
    runs(alice, *range(30))
    with django_assert_max_num_queries(len(few.captured_queries)):
        answer = client.get(PAGE)
    assert number(answer.content.decode(), "usage-calls") == "91"
