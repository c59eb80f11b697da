"""docs/semantics.md §5.1–§5.4, §5.6, §5.7: the run transcript, continue (K snapping, auto-fork,
fork, in place), regenerate, and the checkpoint timeline."""

from __future__ import annotations

import threading

import pytest

from runs_app.models import Run
from runs_app.providers.scripted import ScriptedProvider
from runs_app.services.branching import snap
from runs_app.services.runs import wait_for_run
from runs_app.transcript import entry_ends
from sessions_app.models import HistoryEvent, Message, Part, Session
from sessions_app.selectors import active_path
from tests.conftest import client_for, new_session, run_turn

pytestmark = pytest.mark.django_db(transaction=True)

TWO_TOOLS = "write a.txt x\nwrite b.txt y\nsay fin"


def cont(api, run_id, **body):
    body.setdefault("wait", True)
    return api.post(f"/api/runs/{run_id}/continue/", body, format="json")


def regen(api, run_id, **body):
    body.setdefault("wait", True)
    return api.post(f"/api/runs/{run_id}/regenerate/", body, format="json")


def transcript(api, run_id) -> list[dict]:
    response = api.get(f"/api/runs/{run_id}/messages/")
    assert response.status_code == 200
    return response.json()


def user_texts(sid) -> list[str]:
    return [
        "".join(p.text for p in m.loaded_parts if p.type == "text")
        for m in active_path(Session.objects.get(id=sid))
        if m.role == "user"
    ]


@pytest.fixture
def prompts(monkeypatch):
    """What the model was sent, call by call."""
    sent: list[list[dict]] = []
    original = ScriptedProvider.astream

    def astream(self, messages, tools, should_abort=lambda: False):  # noqa: ANN001, ANN202
        sent.append([dict(m) for m in messages])
        return original(self, messages, tools, should_abort=should_abort)

    monkeypatch.setattr(ScriptedProvider, "astream", astream)
    return sent


def test_the_transcript_is_model_api_messages(api):
    sid = new_session(api)
    run = run_turn(api, sid, TWO_TOOLS)
    entries = transcript(api, run["id"])
    assert [e["role"] for e in entries] == ["user", "assistant", "tool", "tool", "assistant"]
    calls = entries[1]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["write", "write"]
    assert [e["tool_call_id"] for e in entries[2:4]] == [c["id"] for c in calls]
    assert entries[4]["content"] == "fin"


@pytest.mark.parametrize(("k", "snapped"), [(0, 0), (1, 1), (2, 1), (3, 1), (4, 4), (5, 5)])
def test_k_snaps_back_to_a_tool_safe_index(api, k, snapped):
    sid = new_session(api)
    run = run_turn(api, sid, TWO_TOOLS)
    fork = cont(api, run["id"], continue_from=k, fork=True).json()
    assert fork["forked_from_message_index"] == snapped
    assert fork["forked_from_run_id"] == run["id"]
    assert len(transcript(api, fork["id"])) >= snapped
    assert transcript(api, fork["id"])[:snapped] == transcript(api, run["id"])[:snapped]


@pytest.mark.parametrize(("k", "snapped"), [(0, 0), (1, 1), (2, 2), (3, 2), (4, 2), (5, 5)])
def test_a_system_message_is_counted(api, k, snapped):
    sid = new_session(api, system_prompt="be brief")
    run = run_turn(api, sid, TWO_TOOLS)
    entries = transcript(api, run["id"])
    assert entries[0] == {"role": "system", "content": "be brief"}
    assert len(entries) == 6
    fork = cont(api, run["id"], continue_from=k, fork=True).json()
    assert fork["forked_from_message_index"] == snapped


def test_snapping_is_idempotent():
    ends = [1, 4, 5, 5, 7, 9]  # includes an empty message (5 twice)
    for system in (False, True):
        for k in range(12):
            once = snap(ends, k, system=system)
            assert snap(ends, once.index, system=system) == once


@pytest.mark.parametrize("bad", ["bogus", -1, True, 1.5, None, [1], {"k": 1}])
def test_a_bad_continue_from_is_a_400(api, bad):
    sid = new_session(api)
    run = run_turn(api, sid, "say hi")
    response = cont(api, run["id"], continue_from=bad)
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["type"] == "ValidationError"
    assert Run.objects.filter(session_id=sid).count() == 1


def test_last_user_drops_the_tool_tail_and_runs_the_tools_again(api):
    sid = new_session(api)
    run = run_turn(api, sid, "append log.txt x\nsay fin")
    worktree = Session.objects.get(id=sid).worktree
    fork = cont(api, run["id"], continue_from="last_user").json()
    assert fork["status"] == "completed" and fork["id"] != run["id"]
    assert fork["forked_from_message_index"] == 1
    tools = Part.objects.filter(message__run_id=fork["id"], type="tool")
    assert [p.tool for p in tools] == ["append"], "the tool ran again"
    # The files went back to what they were at the cut first, so the line is there once.
    assert (worktree / "log.txt").read_text() == "x\n"
    assert [e["role"] for e in transcript(api, fork["id"])] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


def test_continuing_a_completed_run_forks_and_sends_the_history_once(api, prompts):
    sid = new_session(api)
    first = run_turn(api, sid, "say first question")
    source_before = transcript(api, first["id"])
    prompts.clear()
    fork = cont(api, first["id"], input="say a new question").json()
    assert fork["status"] == "completed"
    assert fork["id"] != first["id"] and fork["session_id"] == sid
    assert fork["mode"] == "continue"
    assert fork["forked_from_run_id"] == first["id"]
    assert fork["forked_from_message_index"] == len(source_before)
    assert Run.objects.get(id=first["id"]).status == "completed", "the source is untouched"
    assert transcript(api, first["id"]) == source_before
    sent = prompts[0]
    assert [m["content"] for m in sent if m["role"] == "user"] == [
        "say first question",
        "say a new question",
    ], "the source's messages are in the next model call exactly once"
    assert sum(1 for m in sent if m.get("content") == "first question") == 1
    assert user_texts(sid) == ["say first question", "say a new question"]


def test_continuing_an_old_answer_makes_a_branch_with_its_files(api):
    sid = new_session(api)
    first = run_turn(api, sid, "write a.txt one\nsay ok")
    second = run_turn(api, sid, "write a.txt two\nwrite b.txt b\nsay ok")
    worktree = Session.objects.get(id=sid).worktree
    fork = cont(api, first["id"], input="append a.txt more").json()
    assert fork["status"] == "completed"
    assert user_texts(sid) == ["write a.txt one\nsay ok", "append a.txt more"]
    assert (worktree / "a.txt").read_text() == "onemore\n"
    assert not (worktree / "b.txt").exists()
    moved = HistoryEvent.objects.get(session_id=sid, kind="continue")
    assert moved.data["files_before"] and moved.data["source_run_id"] == first["id"]
    # The second turn is a sibling branch, still there.
    second_leaf = Message.objects.filter(run_id=second["id"]).order_by("-id").first()
    assert (
        api.post(
            f"/api/sessions/{sid}/head/", {"message_id": second_leaf.id}, format="json"
        ).status_code
        == 200
    )
    assert user_texts(sid) == ["write a.txt one\nsay ok", "write a.txt two\nwrite b.txt b\nsay ok"]


def test_fork_true_forks_a_run_that_could_continue_in_place(api):
    sid = new_session(api)
    failed = run_turn(api, sid, "fail boom", status="error")
    assert failed["status"] == "error"
    fork = cont(api, failed["id"], input="say again", fork=True).json()
    assert fork["id"] != failed["id"] and fork["forked_from_run_id"] == failed["id"]
    assert Run.objects.get(id=failed["id"]).status == "error"


def test_an_error_run_continues_in_place(api):
    sid = new_session(api)
    failed = run_turn(api, sid, "fail boom", status="error")
    again = cont(api, failed["id"], input="say recovered").json()
    assert again["id"] == failed["id"], "in place: the same run"
    assert again["status"] == "completed" and again["error"] is None
    assert again["forked_from_run_id"] is None
    assert transcript(api, failed["id"])[-1]["content"] == "recovered"
    assert Run.objects.filter(session_id=sid).count() == 1


def test_a_cancelled_run_continues_in_place(api):
    sid = new_session(api)
    run = api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"role": "user", "content": "pace 50\nsay " + "word " * 200}]},
        format="json",
    ).json()
    deadline = threading.Event()
    for _ in range(200):
        if Part.objects.filter(message__run_id=run["id"], type="text").exclude(text="").exists():
            break
        deadline.wait(0.02)
    assert api.post(f"/api/runs/{run['id']}/cancel/").status_code == 202
    for _ in range(300):
        if Run.objects.get(id=run["id"]).status == "cancelled":
            break
        deadline.wait(0.02)
    assert Run.objects.get(id=run["id"]).status == "cancelled"
    again = cont(api, run["id"], input="say finished").json()
    assert again["id"] == run["id"] and again["status"] == "completed"
    assert transcript(api, run["id"])[-1]["content"] == "finished"


def test_a_running_run_needs_fork_and_a_busy_session_rejects(api):
    sid = new_session(api)
    done = run_turn(api, sid, "say one")
    slow = api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"role": "user", "content": "wait 3"}]},
        format="json",
    ).json()
    response = cont(api, slow["id"], wait=False)
    assert response.status_code == 409 and response.json()["error"]["type"] == "ConflictError"
    response = cont(api, done["id"], input="say two", wait=False)
    assert response.status_code == 409
    assert response.json()["error"]["type"] == "SessionBusyError"
    queued = cont(api, done["id"], input="say two", multitask_strategy="enqueue", wait=False)
    assert queued.status_code == 202 and queued.json()["status"] == "pending"
    api.post(f"/api/runs/{slow['id']}/cancel/")
    finished = wait_for_run(Run.objects.get(id=queued.json()["id"]), timeout=30)
    assert finished.status == "completed"
    assert user_texts(sid) == ["say one", "say two"]


def test_a_pending_revert_blocks_continue(api):
    sid = new_session(api)
    run = run_turn(api, sid, "write a.txt 1")
    run_turn(api, sid, "write a.txt 2")
    user = Message.objects.filter(session_id=sid, role="user").order_by("-id").first()
    api.post(f"/api/sessions/{sid}/revert/", {"message_id": user.id}, format="json")
    response = cont(api, run["id"], input="say x")
    assert response.status_code == 409
    assert "revert" in response.json()["error"]["message"]


def test_regenerate_keeps_the_tool_results_and_never_reruns_tools(api, prompts):
    sid = new_session(api)
    run = run_turn(api, sid, "append log.txt x\nsay final text")
    worktree = Session.objects.get(id=sid).worktree
    new = regen(api, run["id"]).json()
    assert new["status"] == "completed" and new["mode"] == "regenerate"
    assert new["forked_from_run_id"] == run["id"]
    assert (worktree / "log.txt").read_text() == "x\n", "the tool did not run again"
    assert not Part.objects.filter(message__run_id=new["id"], type="tool").exists()
    assert prompts[-1][-1]["role"] == "tool", "the model answered again after the tool result"
    assert transcript(api, new["id"])[-1]["content"] == "final text"
    # replace_original (default): the source leaves the history.
    runs = api.get(f"/api/sessions/{sid}/runs/").json()
    assert [r["id"] for r in runs] == [new["id"]]
    assert Run.objects.get(id=run["id"]).replaced_by == new["id"]
    hidden = Message.objects.filter(run_id=run["id"], hidden=True)
    assert [m.role for m in hidden] == ["assistant"]
    assert len(api.get(f"/api/sessions/{sid}/runs/?all=1").json()) == 2


def test_regenerate_can_keep_the_original_for_comparison(api):
    sid = new_session(api)
    run = run_turn(api, sid, "say an answer")
    new = regen(api, run["id"], replace_original=False).json()
    assert new["status"] == "completed"
    runs = api.get(f"/api/sessions/{sid}/runs/").json()
    assert {r["id"] for r in runs} == {run["id"], new["id"]}
    tree = api.get(f"/api/sessions/{sid}/messages/?tree=1").json()["results"]
    answers = [m for m in tree if m["role"] == "assistant"]
    assert len(answers) == 2 and not any(m["hidden"] for m in answers)
    assert answers[0]["parent_id"] == answers[1]["parent_id"], "siblings"


def test_regenerate_of_an_unfinished_run_is_a_conflict(api):
    sid = new_session(api)
    slow = api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"role": "user", "content": "wait 2"}]},
        format="json",
    ).json()
    assert regen(api, slow["id"], wait=False).status_code == 409
    assert regen(api, slow["id"], replace_original="yes").status_code == 400
    api.post(f"/api/runs/{slow['id']}/cancel/")
    assert wait_for_run(Run.objects.get(id=slow["id"]), timeout=30).status == "cancelled"


def test_outsiders_get_404(api, outsider):
    sid = new_session(api)
    run = run_turn(api, sid, "say hi")
    other = client_for(outsider)
    assert other.get(f"/api/runs/{run['id']}/messages/").status_code == 404
    assert cont(other, run["id"]).status_code == 404
    assert regen(other, run["id"]).status_code == 404
    assert other.get(f"/api/sessions/{sid}/checkpoints/").status_code == 404


def test_the_checkpoint_timeline_gives_ks_continue_accepts(api):
    sid = new_session(api)
    run = run_turn(api, sid, TWO_TOOLS)
    timeline = api.get(f"/api/sessions/{sid}/checkpoints/").json()
    mine = [c for c in timeline if c["run_id"] == run["id"]]
    assert [(c["kind"], c["index"]) for c in mine] == [
        ("input", 1),
        ("tool-batch", 4),
        ("answer", 5),
    ]
    assert mine[1]["snapshot"] and mine[1]["step"] == 0
    assert mine[1]["preview"] == "tools: write, write" and mine[2]["preview"] == "fin"
    for checkpoint in mine:
        fork = cont(api, run["id"], continue_from=checkpoint["index"], fork=True).json()
        assert fork["forked_from_message_index"] == checkpoint["index"], "a fixed point"


def test_entry_ends_match_the_transcript(api):
    sid = new_session(api, system_prompt="sys")
    run_turn(api, sid, TWO_TOOLS)
    run_turn(api, sid, "say more")
    path = active_path(Session.objects.get(id=sid))
    ends = entry_ends(path, "sys")
    last_run = Run.objects.filter(session_id=sid).order_by("-id").first()
    assert ends[-1] == len(transcript(api, last_run.id))


def worktree_files(api, sid) -> set[str]:
    return {f["path"] for f in api.get(f"/api/sessions/{sid}/files/").json()}


def test_a_branch_switch_puts_that_branch_s_files_back(api, sid):
    """The branch switcher shows a branch's messages and its files: a file only the other
    branch made is gone, and comes back with that branch (issue 17)."""
    run_turn(api, sid, "write a.txt 1")
    second = run_turn(api, sid, "write b.txt 2")
    second_user = Message.objects.get(id=second["input_message_id"])
    # Edit the second prompt: a new branch from its parent, files as they were there.
    k = next(
        c["index"]
        for c in api.get(f"/api/sessions/{sid}/checkpoints/").json()
        if c["message_id"] == second_user.id
    )
    edited = cont(api, second["id"], continue_from=k - 1, input="say other")
    assert edited.status_code == 200, edited.json()
    assert worktree_files(api, sid) == {"a.txt"}

    back = api.post(f"/api/sessions/{sid}/head/", {"message_id": second_user.id}, format="json")
    assert back.status_code == 200
    assert worktree_files(api, sid) == {"a.txt", "b.txt"}
    assert b"".join(api.get(f"/api/sessions/{sid}/files/b.txt").streaming_content) == b"2"
    event = HistoryEvent.objects.filter(session_id=sid, kind="head").latest("id")
    assert event.data["to_head"] == back.json()["head_message_id"]

    other_user = Message.objects.filter(session_id=sid, role="user").latest("id")
    api.post(f"/api/sessions/{sid}/head/", {"message_id": other_user.id}, format="json")
    assert worktree_files(api, sid) == {"a.txt"}


def test_a_branch_switch_waits_for_a_pending_revert(api, sid):
    first = run_turn(api, sid, "write a.txt 1")
    run_turn(api, sid, "write b.txt 2")
    last = Message.objects.filter(session_id=sid).latest("id")
    api.post(f"/api/sessions/{sid}/revert/", {"message_id": last.id}, format="json")
    switched = api.post(
        f"/api/sessions/{sid}/head/", {"message_id": first["input_message_id"]}, format="json"
    )
    assert switched.status_code == 409
    assert "revert is pending" in switched.json()["error"]["message"]
