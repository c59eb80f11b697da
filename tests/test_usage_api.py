"""Issue 18: GET /api/usage/ and GET /api/usage/quota/ — the caller's numbers, equal to the
sum of their messages' usage; nobody else's unless they are a superuser."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.contrib.auth.models import Group, User

from quotas_app.models import Quota, UsageRecord
from quotas_app.services import record_usage, usage_record
from sessions_app.models import Message
from tests.conftest import client_for, new_session, run_turn

pytestmark = pytest.mark.django_db(transaction=True)

NOON = datetime(2025, 3, 14, 12, 0, 0, tzinfo=UTC)


def message_sums(user: User) -> dict[str, int]:
    tokens = [
        m.tokens for m in Message.objects.filter(session__owner=user, role="assistant") if m.tokens
    ]
    inp = sum(t.get("input_tokens", 0) for t in tokens)
    out = sum(t.get("output_tokens", 0) for t in tokens)
    return {
        "calls": len(tokens),
        "input_tokens": inp,
        "output_tokens": out,
        "tokens": inp + out,
    }


def calls_of(
    user: User, *, session: str, model: str, at: datetime, n: int = 1, cost: str = "0.25"
) -> None:
    with mock.patch("quotas_app.clock.now", return_value=at):
        record_usage(
            [
                usage_record(
                    user_id=user.pk,
                    session_id=session,
                    run_id="run_x",
                    message_id=f"msg_{i}",
                    model=model,
                    usage={"input_tokens": 10, "output_tokens": 5, "cost_usd": cost},
                )
                for i in range(n)
            ]
        )


def test_the_totals_equal_the_sum_of_the_messages_usage(api, owner):
    first, second = new_session(api), new_session(api)
    run_turn(api, first, "write a.txt x\nsay done")
    run_turn(api, second, "say hello there")
    answer = api.get("/api/usage/").json()
    expected = message_sums(owner)
    assert {k: answer["totals"][k] for k in expected} == expected
    assert answer["user"] == {"id": owner.pk, "username": "alice"}
    assert answer["group_by"] == "day" and len(answer["rows"]) == 1
    assert answer["rows"][0]["calls"] == expected["calls"] == 3
    by_session = api.get("/api/usage/?group_by=session").json()["rows"]
    assert {r["session_id"]: r["calls"] for r in by_session} == {first: 2, second: 1}
    assert {r["title"] for r in by_session} == {"t"}
    by_model = api.get("/api/usage/?group_by=model").json()["rows"]
    assert [(r["model"], r["tokens"]) for r in by_model] == [("scripted", expected["tokens"])]


def test_rows_by_day_model_and_session_within_the_range(api, owner):
    calls_of(owner, session="ses_a", model="m1", at=NOON, n=2, cost="0.5")
    calls_of(owner, session="ses_b", model="m2", at=NOON + timedelta(days=1), n=1, cost="2")
    calls_of(owner, session="ses_b", model="m2", at=NOON + timedelta(days=40), n=1, cost="9")
    answer = api.get("/api/usage/?from=2025-03-14&to=2025-03-15").json()
    assert answer["from"] == "2025-03-14T00:00:00Z" and answer["to"] == "2025-03-16T00:00:00Z"
    assert answer["totals"] == {
        "calls": 3,
        "input_tokens": 30,
        "output_tokens": 15,
        "cached_input_tokens": 0,
        "tokens": 45,
        "cost_usd": 3.0,
    }
    assert [(r["day"], r["calls"], r["cost_usd"]) for r in answer["rows"]] == [
        ("2025-03-14", 2, 1.0),
        ("2025-03-15", 1, 2.0),
    ]
    url = "/api/usage/?from=2025-03-14&to=2025-03-15&group_by="
    models = api.get(url + "model").json()["rows"]
    assert [(r["model"], r["cost_usd"]) for r in models] == [("m2", 2.0), ("m1", 1.0)]
    sessions = api.get(url + "session").json()["rows"]
    assert [(r["session_id"], r["title"]) for r in sessions] == [("ses_b", None), ("ses_a", None)]


def test_the_range_and_the_rows_are_bounded(api, owner, settings):
    settings.USAGE_API_MAX_ROWS = 1
    calls_of(owner, session="ses_a", model="m1", at=NOON, n=1, cost="1")
    calls_of(owner, session="ses_b", model="m1", at=NOON, n=1, cost="2")
    answer = api.get("/api/usage/?from=2025-03-01&to=2025-03-31&group_by=session").json()
    assert answer["truncated"] is True and len(answer["rows"]) == 1
    assert answer["totals"]["calls"] == 2
    for query, message in (
        ("from=2024-01-01&to=2025-03-01", "The range may span at most 366 days."),
        ("from=2025-03-02&to=2025-03-01", "from must be before to."),
        ("from=yesterday", "from must be a date (YYYY-MM-DD) or an ISO 8601 date-time."),
        ("group_by=week", "group_by must be 'day', 'model' or 'session'."),
    ):
        response = api.get(f"/api/usage/?{query}")
        assert response.status_code == 400, query
        assert response.json()["error"] == {"type": "ValidationError", "message": message}


def test_an_outsider_sees_nothing_of_another_users_usage(api, owner, outsider, outsider_api):
    run_turn(api, new_session(api), "say mine")
    mine = api.get("/api/usage/").json()
    assert mine["totals"]["calls"] == 1
    theirs = outsider_api.get("/api/usage/").json()
    assert theirs["totals"]["calls"] == 0 and theirs["rows"] == []
    for query in ("?user=alice", f"?user={owner.pk}"):
        for url in ("/api/usage/", "/api/usage/quota/"):
            response = outsider_api.get(url + query)
            assert response.status_code == 403
            assert response.json()["error"] == {
                "type": "PermissionDenied",
                "message": "Only a superuser may see another user's usage.",
            }
    assert outsider_api.get("/api/usage/?user=mallory").json()["totals"]["calls"] == 0
    assert client_for(None).get("/api/usage/").status_code == 401


def test_staff_see_their_own_and_superusers_anyones(api, owner):
    run_turn(api, new_session(api), "say mine")
    staff = User.objects.create_user("sam", password="x", is_staff=True)
    assert client_for(staff).get("/api/usage/?user=alice").status_code == 403
    root = User.objects.create_superuser("root", password="x")
    boss = client_for(root)
    for query in ("?user=alice", f"?user={owner.pk}"):
        answer = boss.get("/api/usage/" + query).json()
        assert answer["user"]["username"] == "alice" and answer["totals"]["calls"] == 1
    assert boss.get("/api/usage/quota/?user=alice").json()["user"]["username"] == "alice"
    assert boss.get("/api/usage/?user=nobody").status_code == 404


def test_the_quota_answer_gives_limits_used_remaining_and_resets(api, owner):
    group = Group.objects.create(name="trial")
    owner.groups.add(group)
    Quota.objects.create(
        group=group, runs_per_minute=10, tokens_per_day=1000, cost_per_month=Decimal("5")
    )
    Quota.objects.create(user=owner, concurrent_runs=2)
    sid = new_session(api)
    with mock.patch("quotas_app.clock.now", return_value=NOON):
        run_turn(api, sid, "say hi")
        calls_of(owner, session=sid, model="m", at=NOON, n=1, cost="1.25")
        answer = api.get("/api/usage/quota/").json()
    tokens = sum(r.input_tokens + r.output_tokens for r in UsageRecord.objects.all())
    assert answer["now"] == "2025-03-14T12:00:00Z"
    assert answer["quotas"] == {
        "runs_per_minute": {
            "limit": 10,
            "used": 1,
            "remaining": 9,
            "resets_at": "2025-03-14T12:01:00Z",
            "unit": "runs",
            "source": "group:trial",
        },
        "tokens_per_day": {
            "limit": 1000,
            "used": tokens,
            "remaining": 1000 - tokens,
            "resets_at": "2025-03-15T00:00:00Z",
            "unit": "tokens",
            "source": "group:trial",
        },
        "cost_per_month": {
            "limit": 5.0,
            "used": 1.25,
            "remaining": 3.75,
            "resets_at": "2025-04-01T00:00:00Z",
            "unit": "usd",
            "source": "group:trial",
        },
        "concurrent_runs": {
            "limit": 2,
            "used": 0,
            "remaining": 2,
            "resets_at": None,
            "unit": "runs",
            "source": "user",
        },
        "sessions": {
            "limit": 1000,
            "used": 1,
            "remaining": 999,
            "resets_at": None,
            "unit": "sessions",
            "source": "default",
        },
        "worktree_bytes": {
            "limit": 200 * 1024 * 1024,
            "used": None,
            "remaining": None,
            "resets_at": None,
            "unit": "bytes",
            "source": "default",
        },
    }


@pytest.mark.parametrize(
    "query",
    [
        "to=9999-12-31",  # its day's end is past the calendar: was an OverflowError, a 500
        "from=0001-01-01&to=0001-01-02",
        "to=0001-01-01",  # 30 days before it, by default
        "from=9999-12-31T23:00:00-05:00&to=9999-12-31",
        "from=0001-01-01T00:00:00%2B05:00",
    ],
)
def test_moments_at_the_ends_of_the_calendar_are_a_400(api, query):
    response = api.get(f"/api/usage/?{query}")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["type"] == "ValidationError"
    assert "must be between 1970-01-01 and 9999-01-01" in response.json()["error"]["message"]
