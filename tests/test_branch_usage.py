"""docs/semantics.md §14.6, ``GET /api/sessions/{id}/usage/``: a session's own usage, the inherited
cost of the history it was forked with, and each branch's own; and no total (the user's
``/api/usage/``, the admin's dashboard) counts a fork's copied calls again."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from quotas_app import dashboard
from quotas_app.models import UsageRecord
from runs_app import dashboard as admin_dashboard
from runs_app.branch_usage import add, zero
from runs_app.models import Run
from sessions_app.models import Message
from tests.conftest import all_queries, new_session, run_turn

pytestmark = pytest.mark.django_db(transaction=True)

# $1 per input token, $2 per output token: costs read as token counts.
MODELS = [{"name": "scripted", "context_window": 50_000, "price": {"input": 1e6, "output": 2e6}}]


@pytest.fixture(autouse=True)
def _priced(settings):
    settings.AGENT_MODELS = json.dumps(MODELS)


def usage(api, sid) -> dict:
    response = api.get(f"/api/sessions/{sid}/usage/")
    assert response.status_code == 200, response.content
    return response.json()


def calls_of(run_ids) -> dict:
    """What the assistant messages of ``run_ids`` recorded (one model call each)."""
    total = zero()
    for tokens in Message.objects.filter(run_id__in=run_ids, role="assistant").values_list(
        "tokens", flat=True
    ):
        if tokens:
            total = add(total, {**tokens, "calls": 1})
    return total


def plus(*sums) -> dict:
    total = zero()
    for s in sums:
        total = add(total, s)
    return total


def minus(a, b) -> dict:
    return {k: round(a[k] - b[k], 8) if k == "cost_usd" else a[k] - b[k] for k in a}


@pytest.fixture
def branched(api):
    """A session with two branches: turn 1, then turn 2 (branch a), and a continue from
    turn 1 (branch b, the head)."""
    sid = new_session(api)
    first = run_turn(api, sid, "say one\nwrite a.txt one")
    second = run_turn(api, sid, "say two")
    third = api.post(
        f"/api/runs/{first['id']}/continue/", {"input": "say other", "wait": True}, format="json"
    ).json()
    assert third["status"] == "completed", third
    return sid, first["id"], second["id"], third["id"]


def test_own_and_branches_add_up_in_a_session_with_two_branches(api, branched):
    sid, first, second, third = branched
    got = usage(api, sid)
    assert got["inherited"] == zero()
    own = calls_of([first, second, third])
    assert own["calls"] >= 3 and own["cost_usd"] > 0
    assert got["own"] == own
    # The same numbers as the session's own ``usage`` (what its runs added up).
    session_usage = api.get(f"/api/sessions/{sid}/").json()["usage"]
    assert {k: session_usage.get(k, 0) for k in own} == own
    branches = {b["head_message_id"]: b["own"] for b in got["branches"]}
    assert len(branches) == 2 and got["truncated"] is False
    leaf_a = Message.objects.filter(run_id=second).order_by("-id").first().id
    leaf_b = Message.objects.filter(run_id=third).order_by("-id").first().id
    assert branches[leaf_a] == calls_of([first, second])
    assert branches[leaf_b] == calls_of([first, third])
    # Each branch counts the shared start once; together with the other's own part: ``own``.
    assert plus(branches[leaf_a], minus(branches[leaf_b], calls_of([first]))) == own


def test_a_fork_inherits_its_source_cost_at_the_fork_point_and_counts_only_its_own(api, branched):
    sid, first, second, _ = branched
    leaf_a = Message.objects.filter(run_id=second).order_by("-id").first().id
    source = usage(api, sid)
    at_fork_point = next(b["own"] for b in source["branches"] if b["head_message_id"] == leaf_a)
    records_before = UsageRecord.objects.count()
    fork = api.post(f"/api/sessions/{sid}/fork/", {"message_id": leaf_a}, format="json").json()
    assert UsageRecord.objects.count() == records_before, "a fork copies no call"
    copied = Run.objects.filter(session_id=fork["id"])
    assert copied.count() == 2 and all(r.forked_from_session_id == sid for r in copied)

    got = usage(api, fork["id"])
    assert got["inherited"] == at_fork_point == calls_of([first, second])
    assert got["own"] == zero()
    assert [b["own"] for b in got["branches"]] == [zero()]

    mine = run_turn(api, fork["id"], "say in the fork")
    assert Run.objects.get(id=mine["id"]).forked_from_session_id is None
    got = usage(api, fork["id"])
    assert got["own"] == calls_of([mine["id"]]) and got["own"]["calls"] >= 1
    assert got["inherited"] == at_fork_point
    assert [b["own"] for b in got["branches"]] == [got["own"]]
    assert usage(api, sid) == source, "the source's numbers do not move"

    # A fork of the fork inherits the whole path: the origin's part and the first fork's own.
    leaf = api.get(f"/api/sessions/{fork['id']}/").json()["head_message_id"]
    second_fork = api.post(
        f"/api/sessions/{fork['id']}/fork/", {"message_id": leaf}, format="json"
    ).json()
    got2 = usage(api, second_fork["id"])
    assert got2["inherited"] == plus(at_fork_point, got["own"])
    assert got2["own"] == zero()

    # The origin deleted (the copies' ``forked_from_session`` goes null): nothing moves.
    assert api.delete(f"/api/sessions/{sid}/").status_code in (200, 204)
    assert not Run.objects.filter(session_id=fork["id"]).exclude(forked_from_session=None)
    assert usage(api, fork["id"]) == got


def test_the_users_totals_count_each_call_once(api, owner, branched):
    sid, *_ = branched
    leaf = api.get(f"/api/sessions/{sid}/").json()["head_message_id"]
    fork = api.post(f"/api/sessions/{sid}/fork/", {"message_id": leaf}, format="json").json()
    run_turn(api, fork["id"], "say more")
    mine, forked = usage(api, sid), usage(api, fork["id"])
    each_once = plus(mine["own"], forked["own"])

    report = api.get("/api/usage/", {"group_by": "session"}).json()
    totals = report["totals"]
    assert totals["calls"] == each_once["calls"]
    assert totals["input_tokens"] == each_once["input_tokens"]
    assert totals["output_tokens"] == each_once["output_tokens"]
    assert totals["cost_usd"] == pytest.approx(each_once["cost_usd"])
    rows = {r["session_id"]: r["calls"] for r in report["rows"]}
    assert rows == {sid: mine["own"]["calls"], fork["id"]: forked["own"]["calls"]}

    # The admin's dashboard reads the same ledger.
    now = datetime.now(UTC)
    calls = dashboard.usage_in(
        start=now - timedelta(days=1), end=now + timedelta(days=1), user_id=owner.pk, group_id=None
    )
    assert dashboard.totals(calls)["calls"] == each_once["calls"]


def test_outsiders_get_404(api, outsider_api, branched):
    sid, *_ = branched
    response = outsider_api.get(f"/api/sessions/{sid}/usage/")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "NotFound"
    assert api.get("/api/sessions/ses_nope/usage/").status_code == 404


def test_a_new_session_has_zero_everywhere(api, sid):
    assert usage(api, sid) == {
        "own": zero(),
        "inherited": zero(),
        "branches": [],
        "truncated": False,
    }


def test_the_admin_dashboard_shows_a_forks_own_and_inherited_cost_apart(api, owner, branched):
    sid, first, second, _ = branched
    leaf_a = Message.objects.filter(run_id=second).order_by("-id").first().id
    fork = api.post(f"/api/sessions/{sid}/fork/", {"message_id": leaf_a}, format="json").json()
    mine = run_turn(api, fork["id"], "say in the fork")
    got = usage(api, fork["id"])

    now = datetime.now(UTC)
    calls = dashboard.usage_in(
        start=now - timedelta(days=1), end=now + timedelta(days=1), user_id=owner.pk, group_id=None
    )
    with all_queries() as listed:
        rows = {row["session_id"]: row for row in admin_dashboard.top_sessions(calls)}
    assert len(listed) == 3, "the ledger, the titles, the inherited: one query each"
    # The fork's row: its own calls from the ledger; its history's cost apart.
    assert rows[fork["id"]]["calls"] == got["own"]["calls"] == calls_of([mine["id"]])["calls"]
    inherited = got["inherited"]
    assert inherited == calls_of([first, second])
    assert rows[fork["id"]]["inherited_text"] == (
        f"${inherited['cost_usd']:,.4f} · {inherited['calls']} calls · "
        f"{inherited['input_tokens'] + inherited['output_tokens']:,} tokens"
    )
    assert "inherited_text" not in rows[sid], "the source inherited nothing"

    # The page, as the owner (staff) sees it.
    owner.is_staff = True
    owner.save()
    client = Client()
    client.force_login(owner)
    page = client.get("/admin/usage/").content.decode()
    assert rows[fork["id"]]["inherited_text"].replace("·", "&middot;") in page or (
        rows[fork["id"]]["inherited_text"] in page
    )
    assert "counted in no total" in page
