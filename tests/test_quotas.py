"""Issue 18: quotas per user and per group, checked where work is admitted, atomically; a run
that crosses its token budget ends with a clear error; usage rows written with the messages."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.db.models import Sum
from django.test import Client

from core.errors import QuotaExceeded
from quotas_app import limits
from quotas_app.models import Quota, RunAdmission, UsageCounter, UsageRecord
from quotas_app.services import admit_run
from runs_app.models import Run
from runs_app.services.runs import start_run
from sessions_app.models import Message, Session
from sessions_app.services.sessions import create_session
from tests.conftest import new_session, run_turn

pytestmark = pytest.mark.django_db(transaction=True)

NOON = datetime(2025, 3, 14, 12, 0, 0, tzinfo=UTC)


def at(moment: datetime):  # noqa: ANN201
    return mock.patch("quotas_app.clock.now", return_value=moment)


def ask(session: Session, user, text: str = "say hi") -> Run:  # noqa: ANN001
    """A run request that is admitted but never started (no worker): it stays pending."""
    return start_run(
        session=session,
        user=user,
        messages=[{"role": "user", "content": text}],
        defer_enqueue=True,
    )


def simultaneous(user, sessions: list[Session], threads: int = 25) -> tuple[int, int]:  # noqa: ANN001
    """One run request per session, from ``threads`` threads released at once: how many were
    admitted and how many refused with QuotaExceeded. (25 threads, not 100: each holds a
    database connection, and the server allows 100 for every test run on the machine.)"""
    admitted, refused, other = [], [], []
    barrier = threading.Barrier(threads)
    chunks = [sessions[i::threads] for i in range(threads)]

    def go(chunk: list[Session]) -> None:
        try:
            barrier.wait()
            for session in chunk:
                try:
                    admitted.append(ask(session, user).id)
                except QuotaExceeded:
                    refused.append(session.id)
                except Exception as exc:  # noqa: BLE001 — counted, the test fails on it
                    other.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=go, args=(chunk,)) for chunk in chunks]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not other, other
    return len(admitted), len(refused)


# -- precedence -----------------------------------------------------------------------------
def test_it_takes_the_most_generous_group_and_the_user_override_wins(owner, settings):
    settings.QUOTA_RUNS_PER_MINUTE = 3
    small, large, free, silent = (
        Group.objects.create(name=n) for n in ("small", "large", "free", "silent")
    )
    Quota.objects.create(group=small, runs_per_minute=10, tokens_per_day=1000)
    Quota.objects.create(group=large, runs_per_minute=20, tokens_per_day=500)
    Quota.objects.create(group=free, tokens_per_day=0)  # unlimited, said explicitly
    Quota.objects.create(group=silent)  # says nothing
    owner.groups.add(silent)
    got = limits.effective(owner.pk)
    assert got.runs_per_minute == 3 and got.sources["runs_per_minute"] == "default"
    assert got.tokens_per_day is None  # the default: unlimited
    owner.groups.add(small, large)
    got = limits.effective(owner.pk)
    assert (got.runs_per_minute, got.sources["runs_per_minute"]) == (20, "group:large")
    assert (got.tokens_per_day, got.sources["tokens_per_day"]) == (1000, "group:small")
    assert got.sessions == settings.SESSIONS_PER_USER_MAX
    owner.groups.add(free)
    assert limits.effective(owner.pk).tokens_per_day is None
    own = Quota.objects.create(user=owner, runs_per_minute=5)
    got = limits.effective(owner.pk)
    assert (got.runs_per_minute, got.sources["runs_per_minute"]) == (5, "user")
    own.tokens_per_day = 7
    own.runs_per_minute = 0
    own.save()
    got = limits.effective(owner.pk)
    assert got.tokens_per_day == 7 and got.runs_per_minute is None


def test_it_resolves_in_one_query(owner, django_assert_num_queries):
    group = Group.objects.create(name="g")
    owner.groups.add(group)
    Quota.objects.create(group=group, runs_per_minute=4)
    Quota.objects.create(user=owner, sessions=2)
    with django_assert_num_queries(1):
        got = limits.effective(owner.pk)
    assert (got.runs_per_minute, got.sessions) == (4, 2)


def test_a_group_limit_on_sessions_holds_everywhere_one_is_made(api, owner):
    group = Group.objects.create(name="trial")
    owner.groups.add(group)
    Quota.objects.create(group=group, sessions=1)
    sid = new_session(api)
    for response in (
        api.post("/api/sessions/", {}, format="json"),
        api.post(f"/api/sessions/{sid}/fork/", {}, format="json"),
    ):
        assert response.status_code == 429
        assert response.json()["error"]["type"] == "QuotaExceeded"
        assert "1 sessions" in response.json()["error"]["message"]
    Quota.objects.filter(group=group).update(sessions=2)
    assert api.post(f"/api/sessions/{sid}/fork/", {}, format="json").status_code == 201


# -- concurrency ----------------------------------------------------------------------------
def test_it_admits_exactly_n_of_simultaneous_requests_per_minute(owner):
    Quota.objects.create(user=owner, runs_per_minute=10)
    sessions = [create_session(owner=owner) for _ in range(100)]
    assert simultaneous(owner, sessions) == (10, 90)
    assert Run.objects.count() == RunAdmission.objects.count() == 10


def test_it_admits_exactly_n_concurrent_runs(owner):
    group = Group.objects.create(name="team")
    owner.groups.add(group)
    Quota.objects.create(group=group, concurrent_runs=10)
    sessions = [create_session(owner=owner) for _ in range(100)]
    assert simultaneous(owner, sessions) == (10, 90)
    assert Run.objects.exclude(status__in=Run.TERMINAL).count() == 10


def test_concurrent_runs_free_up_when_one_ends(owner):
    Quota.objects.create(user=owner, concurrent_runs=1)
    first, second = create_session(owner=owner), create_session(owner=owner)
    run = ask(first, owner)
    with pytest.raises(QuotaExceeded, match="1 runs in progress"):
        ask(second, owner)
    Run.objects.filter(id=run.id).update(status=Run.Status.COMPLETED)
    ask(second, owner)


# -- windows --------------------------------------------------------------------------------
def test_runs_per_minute_resets_at_the_end_of_the_window(owner):
    Quota.objects.create(user=owner, runs_per_minute=2)
    sessions = [create_session(owner=owner) for _ in range(4)]
    with at(NOON):
        ask(sessions[0], owner)
    with at(NOON + timedelta(seconds=30)):
        ask(sessions[1], owner)
        with pytest.raises(QuotaExceeded) as refused:
            ask(sessions[2], owner)
    assert refused.value.message == (
        "You have used 2 of your 2 runs per minute; the next one is allowed at 12:01:00 UTC."
    )
    assert refused.value.retry_after == 30
    with at(NOON + timedelta(seconds=59.999)), pytest.raises(QuotaExceeded):
        ask(sessions[2], owner)
    with at(NOON + timedelta(seconds=60)):
        ask(sessions[2], owner)  # the first left the window
        with pytest.raises(QuotaExceeded, match="allowed at 12:01:30 UTC"):
            ask(sessions[3], owner)
    assert RunAdmission.objects.count() == 2  # the row that left the window was pruned


def test_tokens_per_day_reset_at_midnight_utc(owner):
    Quota.objects.create(user=owner, tokens_per_day=100)
    UsageCounter.objects.create(
        user=owner, period="day", start=NOON.date(), input_tokens=60, output_tokens=40
    )
    session = create_session(owner=owner)
    with at(NOON), pytest.raises(QuotaExceeded) as refused:
        ask(session, owner)
    assert refused.value.message == (
        "You have used 100 of your 100 tokens per day;"
        " the budget resets at 2025-03-15 00:00:00 UTC."
    )
    assert refused.value.retry_after == 12 * 3600
    with at(datetime(2025, 3, 15, 0, 0, 0, tzinfo=UTC)):
        ask(session, owner)


def test_cost_per_month_resets_on_the_first(owner):
    Quota.objects.create(user=owner, cost_per_month=Decimal("5.00"))
    UsageCounter.objects.create(
        user=owner, period="month", start=NOON.date().replace(day=1), cost_usd=Decimal("5.01")
    )
    session = create_session(owner=owner)
    with at(NOON), pytest.raises(QuotaExceeded, match=r"\$5.0100 of your \$5.00 per month"):
        ask(session, owner)
    with at(datetime(2025, 4, 1, tzinfo=UTC)):
        ask(session, owner)


def test_no_run_limit_takes_no_lock_and_writes_nothing(owner, django_assert_num_queries):
    with django_assert_num_queries(1):  # the limits, nothing else
        admit_run(user_id=owner.pk, run_id="run_x", active_runs=lambda: 0)
    assert not RunAdmission.objects.exists()


# -- the API --------------------------------------------------------------------------------
def test_a_refused_request_is_a_429_naming_the_limit_with_retry_after(api, owner):
    Quota.objects.create(user=owner, runs_per_minute=1)
    first, second = new_session(api), new_session(api)
    with at(NOON):
        run = run_turn(api, first, "say one")
        body = {"messages": [{"role": "user", "content": "say two"}]}
        for url, data in (
            (f"/api/sessions/{second}/runs/", body),
            (f"/api/sessions/{second}/runs/stream/", body),
            (f"/api/sessions/{first}/runs/", {"mode": "resume"}),
            (f"/api/runs/{run['id']}/continue/", {"input": "more"}),
            (f"/api/runs/{run['id']}/regenerate/", {}),
        ):
            response = api.post(url, data, format="json")
            assert response.status_code == 429, url
            assert response.json() == {
                "error": {
                    "type": "QuotaExceeded",
                    "message": "You have used 1 of your 1 runs per minute;"
                    " the next one is allowed at 12:01:00 UTC.",
                    # The moment itself, for clients that say it in the reader's own zone.
                    "resets_at": NOON.replace(minute=1).isoformat().replace("+00:00", "Z"),
                }
            }
            assert response["Retry-After"] == "60"
    assert Run.objects.count() == 1


def test_a_worktree_quota_is_a_tool_error_not_a_429(api, owner):
    Quota.objects.create(user=owner, worktree_bytes=100)
    sid = new_session(api)
    run_turn(api, sid, f"write big.txt {'x' * 150}\nwrite small.txt ok")
    tools = [
        p["state"]
        for m in api.get(f"/api/sessions/{sid}/messages/").json()["results"]
        for p in m["parts"]
        if p["type"] == "tool"
    ]
    assert [t["status"] for t in tools] == ["error", "completed"]
    assert "at most 100" in tools[0]["error"]


# -- usage rows and the budget mid-run ------------------------------------------------------
def test_each_model_call_writes_one_usage_row_with_its_message(api, owner):
    sid = new_session(api)
    run_turn(api, sid, "write a.txt one\nsay done")
    run_turn(api, sid, "say two")
    calls = Message.objects.filter(session_id=sid, role="assistant").exclude(tokens={})
    records = UsageRecord.objects.filter(user=owner)
    assert records.count() == calls.count() == 3
    by_message = {r.message_id: r for r in records}
    for message in calls:
        record = by_message[message.id]
        assert (record.input_tokens, record.output_tokens) == (
            message.tokens["input_tokens"],
            message.tokens["output_tokens"],
        )
        assert record.session_id == sid and record.run_id == message.run_id
    day = UsageCounter.objects.get(user=owner, period="day")
    month = UsageCounter.objects.get(user=owner, period="month")
    sums = records.aggregate(i=Sum("input_tokens"), o=Sum("output_tokens"))
    for counter in (day, month):
        assert (counter.input_tokens, counter.output_tokens, counter.calls) == (
            sums["i"],
            sums["o"],
            3,
        )


def test_a_run_that_crosses_its_token_budget_finishes_its_step_and_ends_in_error(api, owner):
    Quota.objects.create(user=owner, tokens_per_day=1)
    sid = new_session(api)
    run = run_turn(api, sid, "write a.txt one\nsay never said", status="error")
    assert run["error"]["reason"] == "quota"
    assert run["error"]["type"] == "QuotaExceeded"
    assert "of your 1 tokens per day; the budget resets at" in run["error"]["message"]
    # The step that crossed it finished: its tool ran, its message completed; no step after.
    session = Session.objects.get(id=sid)
    assert (session.worktree / "a.txt").read_text() == "one"
    assistant = Message.objects.filter(session_id=sid, role="assistant")
    assert assistant.count() == 1 and assistant.get().completed_at is not None
    assert UsageRecord.objects.filter(run_id=run["id"]).count() == 1
    assert Session.objects.get(id=sid).status == "idle"
    again = api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"role": "user", "content": "say hi"}]},
        format="json",
    )
    assert again.status_code == 429 and "tokens per day" in again.json()["error"]["message"]
    assert int(again["Retry-After"]) > 0
    # The operator raises it: the user goes on.
    Quota.objects.filter(user=owner).update(tokens_per_day=0)
    run_turn(api, sid, "say hi")


# -- the admin ------------------------------------------------------------------------------
def test_a_superuser_edits_quotas_on_the_group_and_user_pages(owner):
    root = User.objects.create_superuser("root", password="x")
    page = Client()
    page.force_login(root)
    blank = {f"quota-0-{name}": "" for name in limits.NAMES}
    form = {
        "quota-TOTAL_FORMS": "1",
        "quota-INITIAL_FORMS": "0",
        "quota-MIN_NUM_FORMS": "0",
        "quota-MAX_NUM_FORMS": "1",
    }
    response = page.post(
        "/admin/auth/group/add/",
        {"name": "trial", **form, **blank, "quota-0-tokens_per_day": "5000"},
    )
    assert response.status_code == 302, response.content[:2000]
    group = Group.objects.get(name="trial")
    assert group.quota.tokens_per_day == 5000 and group.quota.runs_per_minute is None
    assert b"quota" in page.get(f"/admin/auth/user/{owner.pk}/change/").content
    owner.groups.add(group)
    assert limits.effective(owner.pk).tokens_per_day == 5000
