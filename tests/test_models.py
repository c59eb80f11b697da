"""Issue 16: the deployment's models (AGENT_MODELS): the list, a session's pick and switch,
unknown models refused naming the ones there are; every model call's tokens and cost on its
message, summed by the run and the session."""

from __future__ import annotations

import json

import pytest
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

from runs_app.models import Run
from sessions_app.models import Message, Session
from tests.conftest import new_session, run_turn, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

MODELS = [
    # $1 per input token and $2 per output token: costs read as token counts.
    {"name": "scripted", "context_window": 50_000, "price": {"input": 1e6, "output": 2e6}},
    {"name": "openai:gpt-4o-mini", "context_window": 128_000, "price": {"input": 0.15}},
]


@pytest.fixture
def catalogue(settings):
    settings.AGENT_MODELS = json.dumps(MODELS)
    return settings


def test_the_models_are_listed_picked_and_switched(api, catalogue):
    listed = api.get("/api/models/").json()
    assert [m["name"] for m in listed["results"]] == ["scripted", "openai:gpt-4o-mini"]
    assert listed["results"][0]["context_window"] == 50_000
    bad = api.post("/api/sessions/", {"model": "openai:gpt-5"}, format="json")
    assert bad.status_code == 400
    message = bad.json()["error"]["message"]
    assert "openai:gpt-5" in message and "scripted, openai:gpt-4o-mini" in message
    sid = new_session(api, model="openai:gpt-4o-mini")
    assert api.get(f"/api/sessions/{sid}/").json()["model"] == "openai:gpt-4o-mini"
    switched = api.patch(f"/api/sessions/{sid}/", {"model": "scripted"}, format="json")
    assert switched.status_code == 200 and switched.json()["model"] == "scripted"
    run = run_turn(api, sid, "say hi")
    assert run["model"] == "scripted"
    refused = api.patch(f"/api/sessions/{sid}/", {"model": "anthropic:x"}, format="json")
    assert refused.status_code == 400 and "offers" in refused.json()["error"]["message"]
    assert Session.objects.get(id=sid).model == "scripted"


def test_without_a_list_any_provider_prefix_is_taken(api):
    assert api.get("/api/models/").json()["results"][0]["name"] == "scripted"
    assert (
        api.post("/api/sessions/", {"model": "anthropic:claude-x"}, format="json").status_code
        == 201
    )
    assert api.post("/api/sessions/", {"model": "gpt"}, format="json").status_code == 400


def test_every_call_records_tokens_and_cost_and_runs_and_the_session_sum_them(api, catalogue):
    sid = new_session(api)
    first = run_turn(api, sid, "write a.txt x\nsay written")
    second = run_turn(api, sid, "say again")
    calls = Message.objects.filter(session_id=sid, role="assistant").order_by("id")
    for message in calls:
        tokens = message.tokens
        assert tokens["input_tokens"] > 0
        expected = tokens["input_tokens"] * 1 + tokens["output_tokens"] * 2
        assert tokens["cost_usd"] == pytest.approx(expected)
    runs = {r.id: r for r in Run.objects.filter(session_id=sid)}
    for run in (first, second):
        mine = [m.tokens for m in calls if m.run_id == run["id"]]
        usage = runs[run["id"]].usage
        assert usage["calls"] == len(mine) == (2 if run is first else 1)
        assert usage["input_tokens"] == sum(t["input_tokens"] for t in mine)
        assert usage["cost_usd"] == pytest.approx(sum(t["cost_usd"] for t in mine))
        assert api.get(f"/api/runs/{run['id']}/").json()["usage"] == usage
    session = api.get(f"/api/sessions/{sid}/").json()["usage"]
    assert session["calls"] == 3
    assert session["output_tokens"] == sum(m.tokens["output_tokens"] for m in calls)
    assert session["cost_usd"] == pytest.approx(sum(m.tokens["cost_usd"] for m in calls))


def test_a_run_resumed_after_an_approval_keeps_counting(api, catalogue):
    sid = new_session(api, permissions={"write": "ask"})
    run = run_turn(api, sid, "write a.txt x", status="requires_action")
    assert Run.objects.get(id=run["id"]).usage["calls"] == 1
    part_id = run["required_action"]["tool_calls"][0]["part_id"]
    api.post(f"/api/runs/{run['id']}/approve/", {"part_id": part_id, "decision": "allow"}, "json")
    wait_until(lambda: Run.objects.get(id=run["id"]).status == "completed")
    assert Run.objects.get(id=run["id"]).usage["calls"] == 2
    assert Session.objects.get(id=sid).usage["calls"] == 2, "each call counted once"


def test_the_window_comes_from_the_list(api, settings):
    settings.AGENT_MODELS = json.dumps([{"name": "scripted", "context_window": 600}])
    settings.SCRIPTED_DEFAULT_PACE_MS = 0
    sid = new_session(api)
    for turn in range(12):
        run_turn(api, sid, f"say turn {turn} " + "words " * 20)
    assert Message.objects.filter(session_id=sid, parts__type="compaction").exists()


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("AGENT_PERMISSIONS", '{"shell": "maybe"}', "AGENT_PERMISSIONS is not valid"),
        ("AGENT_PERMISSIONS", "{not json", "AGENT_PERMISSIONS is not valid"),
        ("AGENT_MODELS", '[{"name": "gpt"}]', "needs a name"),
        ("AGENT_MODELS", "{}", "non-empty JSON list"),
    ],
)
def test_a_deployment_with_unreadable_rules_or_models_does_not_start(settings, name, value, says):
    setattr(settings, name, value)
    with pytest.raises(ImproperlyConfigured, match=says):
        apps.get_app_config("sessions_app").ready()
