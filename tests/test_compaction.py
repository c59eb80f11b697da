"""docs/semantics.md §10: context compaction, driven deterministically by the scripted model's small
context window. Runs go through the API and the run host (in process)."""

from __future__ import annotations

import pytest

from runs_app import compaction
from runs_app.providers import scripted
from sessions_app.models import Message, Part, Session
from tests.conftest import new_session, run_turn, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW = 1000  # tokens; the budget is 800 (AGENT_COMPACT_AT 0.8)


@pytest.fixture
def small_window(settings, monkeypatch):
    settings.SCRIPTED_CONTEXT_WINDOW = WINDOW
    settings.AGENT_COMPACT_AT = 0.8
    settings.SCRIPTED_DEFAULT_PACE_MS = 0
    sent: list[int] = []
    real = scripted.ScriptedProvider.astream

    def recording(self, messages, tools, *, should_abort):  # noqa: ANN001, ANN202
        sent.append(compaction.estimate_tokens(messages))
        return real(self, messages, tools, should_abort=should_abort)

    monkeypatch.setattr(scripted.ScriptedProvider, "astream", recording)
    return sent


def transcript(api, run_id: str, original: bool = False) -> list[dict]:  # noqa: ANN001
    query = "?original=1" if original else ""
    return api.get(f"/api/runs/{run_id}/messages/{query}").json()


def summaries(session_id: str) -> list[Part]:
    return list(
        Part.objects.filter(session_id=session_id, type=Part.Type.COMPACTION).order_by("id")
    )


def test_a_200_turn_session_keeps_every_model_call_under_the_budget(api, small_window):
    sid = new_session(api)
    for turn in range(200):
        run = run_turn(api, sid, f"say turn {turn} " + "lorem ipsum dolor sit amet " * 3)
        assert run["status"] == "completed"
    budget = int(WINDOW * 0.8)
    assert max(small_window) <= budget, f"largest call {max(small_window)} > {budget} tokens"
    made = summaries(sid)
    assert len(made) >= 10, "it compacted again and again"
    last = transcript(api, run["id"])
    assert last[0]["content"].startswith("Summary of the conversation so far")
    assert "turn 199" in last[-1]["content"] and "turn 198" in last[1]["content"] + str(last)
    # Nothing was deleted: the original transcript has every turn.
    original = transcript(api, run["id"], original=True)
    users = [e for e in original if e["role"] == "user"]
    assert len(users) == 200 and users[0]["content"].startswith("say turn 0 ")
    assert Message.objects.filter(session_id=sid, role="user").count() == 200
    # The summary says what was asked (the scripted model's deterministic summary).
    assert "the user asked" in made[-1].text and "say turn" in made[-1].text
    assert made[-1].data["tokens_after"] < made[-1].data["tokens_before"]


def test_compact_now_ends_with_result_compact_and_the_model_sees_the_summary(api):
    sid = new_session(api)
    for turn in range(3):
        run_turn(api, sid, f"say answer {turn}")
    answer = api.post(f"/api/sessions/{sid}/compact/")
    assert answer.status_code == 202
    run_id = answer.json()["id"]
    run = wait_until(
        lambda: (r := api.get(f"/api/runs/{run_id}/").json())["status"] == "completed" and r
    )
    assert run["result"] == "compact" and run["mode"] == "compact"
    (summary,) = summaries(sid)
    # Everything before the latest user message is replaced: the 3rd turn stays verbatim.
    assert summary.data["replaced"] == 4
    messages = api.get(f"/api/sessions/{sid}/messages/").json()["results"]
    kinds = [p["type"] for m in messages for p in m["parts"]]
    assert "compaction" in kinds
    after = run_turn(api, sid, "say next")
    sent = transcript(api, after["id"])
    assert sent[0]["content"].startswith("Summary of the conversation so far")
    assert [e["content"] for e in sent if e["role"] == "user"][1:] == ["say answer 2", "say next"]
    assert all("say answer 0" not in e["content"] for e in sent[1:]), "replaced by the summary"
    # A busy session answers 409, as for any run request; an outsider 404.
    outsider = api.__class__()
    assert outsider.post(f"/api/sessions/{sid}/compact/").status_code in (401, 403, 404)


def test_revert_and_fork_across_a_compaction(api, small_window):
    sid = new_session(api)
    runs = [run_turn(api, sid, f"write f{i}.txt {'x' * 200}") for i in range(6)]
    made = summaries(sid)
    assert made, "the writes filled the window"
    summary_message = made[0].message_id
    # Fork after the compaction: the fork's model sees the summary too (positions, not ids).
    fork = api.post(f"/api/sessions/{sid}/fork/", {}, format="json").json()
    forked = run_turn(api, fork["id"], "say in the fork")
    sent = transcript(api, forked["id"])
    assert sent[0]["content"].startswith("Summary of the conversation")
    # Never a tool result without its call: each answers a call made before it.
    called: set[str] = set()
    for entry in sent:
        called |= {c["id"] for c in entry.get("tool_calls") or []}
        if entry["role"] == "tool":
            assert entry["tool_call_id"] in called
    # Revert to before the summary: the summary leaves the path; the model sees everything.
    first_user = Message.objects.filter(session_id=sid, role="user").order_by("id")[1]
    api.post(f"/api/sessions/{sid}/revert/", {"message_id": first_user.id}, format="json")
    api.post(f"/api/sessions/{sid}/cleanup/")
    assert not Message.objects.filter(id=summary_message).exists()
    again = run_turn(api, sid, "say after the revert")
    sent = transcript(api, again["id"])
    assert not sent[0]["content"].startswith("Summary"), "the summary left with the revert"
    session = Session.objects.get(id=sid)
    assert sorted(p.name for p in session.worktree.iterdir()) == ["f0.txt"]
    assert runs[0]["status"] == "completed"
