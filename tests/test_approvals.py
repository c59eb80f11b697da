"""Issue 15 / docs/semantics.md §8: tool permissions and the owner's approval of calls that wait.
Runs go through the API and the run host (in process); the real-path test (a Celery worker
restarted while the run waits) is tests/e2e/test_approvals_e2e.py."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from runs_app.execution.host import host
from runs_app.models import Run
from sessions_app import permissions
from sessions_app.models import HistoryEvent, Part, Session
from tests.conftest import client_for, new_session, run_turn, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def tool_parts(session_id: str) -> list[Part]:
    return list(
        Part.objects.filter(session_id=session_id, type=Part.Type.TOOL).order_by(
            "message_id", "order"
        )
    )


def approve(api, run_id: str, part_id: str, decision: str, reason: str = "", status=200):  # noqa: ANN001, ANN201
    answer = api.post(
        f"/api/runs/{run_id}/approve/",
        {"part_id": part_id, "decision": decision, "reason": reason},
        format="json",
    )
    assert answer.status_code == status, answer.content
    return answer.json()


def settled(api, run_id: str) -> dict:  # noqa: ANN001
    return wait_until(
        lambda: (
            (r := api.get(f"/api/runs/{run_id}/").json())["status"]
            in ("completed", "error", "cancelled", "requires_action")
            and r
        ),
        20,
        "the run to stop",
    )


def test_an_ask_stops_the_run_before_the_call_holding_no_worker(api, tmp_path):
    sid = new_session(api, permissions={"write": "ask"})
    run = run_turn(api, sid, "write a.txt hello", status="requires_action")
    session = api.get(f"/api/sessions/{sid}/").json()
    assert session["status"] == "waiting" and session["busy_run_id"] == run["id"]
    assert session["permissions"] == {"write": "ask"}
    (call,) = run["required_action"]["tool_calls"]
    assert run["required_action"]["type"] == "approve_tools"
    assert call["tool"] == "write" and call["input"] == {"path": "a.txt", "content": "hello"}
    assert "+hello" in call["preview"] and "b/a.txt" in call["preview"]
    part = Part.objects.get(id=call["part_id"])
    assert part.state["status"] == "pending"
    assert part.state["approval"]["status"] == "requested"
    assert not (Session.objects.get(id=sid).worktree / "a.txt").exists(), "not run"
    assert run["id"] not in host.runs, "no coroutine, thread or slot waits with it"
    # The session is held: another run is refused as for a busy session.
    busy = api.post(f"/api/sessions/{sid}/runs/", {"messages": [{"content": "say x"}]}, "json")
    assert busy.status_code == 409


def test_allow_runs_the_call_and_the_run_goes_on(api):
    sid = new_session(api, permissions={"write": "ask"})
    run = run_turn(api, sid, "write a.txt hello\nsay written", status="requires_action")
    part_id = run["required_action"]["tool_calls"][0]["part_id"]
    decided = approve(api, run["id"], part_id, "allow")
    assert decided["status"] in ("pending", "running", "completed")
    assert settled(api, run["id"])["status"] == "completed"
    assert (Session.objects.get(id=sid).worktree / "a.txt").read_text() == "hello"
    state = Part.objects.get(id=part_id).state
    assert state["status"] == "completed" and state["approval"]["status"] == "allowed"
    assert api.get(f"/api/sessions/{sid}/").json()["status"] == "idle"
    event = HistoryEvent.objects.get(session_id=sid, kind="approval")
    assert event.data["decision"] == "allow" and event.data["part_id"] == part_id


def test_deny_gives_the_model_the_reason(api):
    sid = new_session(api, permissions={"write": "ask"})
    run = run_turn(api, sid, "write a.txt hello", status="requires_action")
    part_id = run["required_action"]["tool_calls"][0]["part_id"]
    approve(api, run["id"], part_id, "deny", reason="not in this folder, please")
    assert settled(api, run["id"])["status"] == "completed"
    assert not (Session.objects.get(id=sid).worktree / "a.txt").exists()
    state = Part.objects.get(id=part_id).state
    assert state["status"] == "error" and state["metadata"]["denied"] is True
    transcript = api.get(f"/api/runs/{run['id']}/messages/").json()
    results = [m["content"] for m in transcript if m["role"] == "tool"]
    assert any("not in this folder, please" in r for r in results), transcript


def test_always_allows_and_adds_a_rule_for_that_exact_argument(api):
    sid = new_session(api, permissions={"write": "ask"})
    run = run_turn(api, sid, "write a.txt 1", status="requires_action")
    approve(api, run["id"], run["required_action"]["tool_calls"][0]["part_id"], "always")
    assert settled(api, run["id"])["status"] == "completed"
    rules = api.get(f"/api/sessions/{sid}/").json()["permissions"]
    assert rules == {"write": {"**": "ask", "exact": {"a.txt": "allow"}}}
    run_turn(api, sid, "write a.txt 2")  # no question this time
    run_turn(api, sid, "write ./a.txt 2")  # the same file
    again = run_turn(api, sid, "write b.txt 3", status="requires_action")
    assert again["required_action"]["tool_calls"][0]["input"]["path"] == "b.txt"
    # What the API shows is what it takes back.
    patch = api.patch(f"/api/sessions/{sid}/", {"permissions": rules}, format="json")
    assert patch.status_code == 200 and patch.json()["permissions"] == rules


def test_always_allows_that_very_command_not_a_pattern_made_of_it(api):
    # Security review finding 9: the approved argument was stored as a glob, so ``*.txt``
    # in an approved command allowed any command between ``ls `` and ``.txt``.
    sid = new_session(api, permissions={"shell": "ask"})
    run = run_turn(api, sid, "shell ls *.txt", status="requires_action")
    approve(api, run["id"], run["required_action"]["tool_calls"][0]["part_id"], "always")
    assert settled(api, run["id"])["status"] == "completed"
    rules = api.get(f"/api/sessions/{sid}/").json()["permissions"]
    assert rules == {"shell": {"**": "ask", "exact": {"ls *.txt": "allow"}}}
    run_turn(api, sid, "shell ls *.txt")  # the approved call: not asked again
    injected = "ls *.txt; echo INJECTED > owned; echo .txt"
    again = run_turn(api, sid, f"shell {injected}", status="requires_action")
    (call,) = again["required_action"]["tool_calls"]
    assert call["input"] == {"command": injected}
    in_force = permissions.in_force(rules)
    assert permissions.decide(in_force, "shell", {"command": "ls a.txt"}) == "ask"


def test_exact_rules_are_strings_and_old_pattern_rules_still_work(settings):
    rules = permissions.with_exact_allow({"write": {"src/*": "ask"}}, "write", {"path": "./a*.txt"})
    assert rules == {"write": {"src/*": "ask", "exact": {"a*.txt": "allow"}}}
    assert permissions.validate(rules) == rules
    decide = permissions.decide
    assert decide(rules, "write", {"path": "a*.txt"}) == "allow"
    assert decide({"write": {"**": "ask", **rules["write"]}}, "write", {"path": "ab.txt"}) == "ask"
    # A rule stored before exact rules existed is a pattern, as it was.
    old = {"write": {"**": "ask", "a.txt": "allow", "exact": "deny"}}
    assert permissions.validate(old) == old
    assert decide(old, "write", {"path": "a.txt"}) == "allow"
    assert decide(old, "write", {"path": "exact"}) == "deny"
    kept = permissions.with_exact_allow(old, "write", {"path": "b.txt"})
    assert kept["write"]["exact"] == {"exact": "deny", "b.txt": "allow"}
    # Exact rules of the defaults and of the session add up; the session's win.
    settings.AGENT_PERMISSIONS = '{"write": {"exact": {"d.txt": "deny", "a*.txt": "deny"}}}'
    merged = permissions.in_force(rules)
    assert merged["write"]["exact"] == {"d.txt": "deny", "a*.txt": "allow"}
    with pytest.raises(ValueError, match="must be allow, ask or deny"):
        permissions.validate({"write": {"exact": {"a": "sometimes"}}})
    with pytest.raises(ValueError, match="at most 1000"):
        permissions.with_exact_allow({}, "shell", {"command": "x" * 1001})


def test_deny_rules_end_the_call_without_asking(api):
    sid = new_session(api, permissions={"delete": "deny"})
    (Session.objects.get(id=sid).worktree / "keep.txt").write_text("x")
    run_turn(api, sid, "delete keep.txt")
    (part,) = tool_parts(sid)
    assert part.state["status"] == "error" and part.state["metadata"]["denied"] is True
    assert (Session.objects.get(id=sid).worktree / "keep.txt").exists()


def test_a_batch_waits_whole_and_runs_in_order_once_decided(api):
    sid = new_session(api, permissions={"write": "ask"})
    run = run_turn(api, sid, "write a.txt x\nread a.txt", status="requires_action")
    write, read = tool_parts(sid)
    assert read.state["status"] == "pending" and read.state["approval"]["status"] == "allowed"
    assert [c["tool"] for c in run["required_action"]["tool_calls"]] == ["write"]
    approve(api, run["id"], write.id, "allow")
    assert settled(api, run["id"])["status"] == "completed"
    write.refresh_from_db()
    read.refresh_from_db()
    assert write.state["status"] == read.state["status"] == "completed"
    assert read.state["output"] == "x", "the read ran after the write"


def test_cancel_while_waiting_interrupts_the_calls(api):
    sid = new_session(api, permissions={"write": "ask"})
    run = run_turn(api, sid, "write a.txt x", status="requires_action")
    answer = api.post(f"/api/runs/{run['id']}/cancel/")
    assert answer.status_code == 202 and answer.json()["status"] == "cancelled"
    (part,) = tool_parts(sid)
    assert part.state["status"] == "error"
    assert part.state["metadata"] == {"interrupted": True, "reason": "cancelled"}
    assert api.get(f"/api/sessions/{sid}/").json()["status"] == "idle"
    approve(api, run["id"], part.id, "allow", status=409)
    # Resume after the cancel: the interrupted call is not run again; the turn ends.
    resumed = api.post(
        f"/api/sessions/{sid}/runs/", {"mode": "resume", "wait": True}, format="json"
    ).json()
    assert resumed["status"] == "completed"
    assert not (Session.objects.get(id=sid).worktree / "a.txt").exists()


def test_a_new_prompt_interrupts_the_waiting_calls(api):
    sid = new_session(api, permissions={"write": "ask"})
    run = run_turn(api, sid, "write a.txt x", status="requires_action")
    new = api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"content": "say instead"}], "multitask_strategy": "interrupt"},
        format="json",
    ).json()
    assert settled(api, new["id"])["status"] == "completed"
    assert Run.objects.get(id=run["id"]).status == "cancelled"
    part = tool_parts(sid)[0]
    assert part.state["metadata"]["reason"] == "prompt"


def test_only_the_owner_decides(api, outsider, owner):
    sid = new_session(api, permissions={"write": "ask"})
    run = run_turn(api, sid, "write a.txt x", status="requires_action")
    part_id = run["required_action"]["tool_calls"][0]["part_id"]
    stranger = client_for(outsider)
    assert stranger.get(f"/api/runs/{run['id']}/").status_code == 404
    answer = stranger.post(
        f"/api/runs/{run['id']}/approve/", {"part_id": part_id, "decision": "allow"}, "json"
    )
    assert answer.status_code == 404
    patch = stranger.patch(f"/api/sessions/{sid}/", {"permissions": {}}, format="json")
    assert patch.status_code == 404
    assert Part.objects.get(id=part_id).state["approval"]["status"] == "requested"
    # Bad input: clear errors, nothing changed.
    bad = api.post(
        f"/api/runs/{run['id']}/approve/", {"part_id": part_id, "decision": "yes"}, "json"
    )
    assert bad.status_code == 400 and "decision must be" in bad.json()["error"]["message"]
    approve(api, run["id"], "prt_nope", "allow", status=409)


def test_permissions_are_checked_at_the_door(api):
    bad = api.post("/api/sessions/", {"permissions": {"write": "maybe"}}, format="json")
    assert bad.status_code == 400 and "allow, ask, deny" in bad.json()["error"]["message"]
    bad = api.post("/api/sessions/", {"permissions": ["write"]}, format="json")
    assert bad.status_code == 400
    sid = new_session(api)
    answer = api.patch(
        f"/api/sessions/{sid}/", {"permissions": {"shell": {"git *": "allow"}}}, format="json"
    )
    assert answer.status_code == 200
    assert answer.json()["permissions"] == {"shell": {"git *": "allow"}}


def test_patterns_the_most_specific_wins_and_defaults_come_first(settings):
    rules = {"write": {"**": "ask", "src/*": "allow", "src/secret.py": "deny"}}
    decide = permissions.decide
    assert decide(rules, "write", {"path": "a.txt"}) == "ask"
    assert decide(rules, "write", {"path": "src/a.py"}) == "allow"
    assert decide(rules, "write", {"path": "src/deep/a.py"}) == "ask", "* stays in a segment"
    assert decide(rules, "write", {"path": "src/secret.py"}) == "deny"
    assert decide(rules, "read", {"path": "src/secret.py"}) == "allow"
    shell = {"shell": {"**": "ask", "git *": "allow", "git push*": "deny"}}
    assert decide(shell, "shell", {"command": "git add a/b"}) == "allow"
    assert decide(shell, "shell", {"command": "git push origin"}) == "deny"
    assert decide(shell, "shell", {"command": "rm -rf /"}) == "ask"
    settings.AGENT_PERMISSIONS = '{"shell": "ask", "write": {"*.lock": "deny"}}'
    merged = permissions.in_force({"write": {"**": "ask"}})
    assert merged == {"shell": "ask", "write": {"*.lock": "deny", "**": "ask"}}
    assert permissions.in_force({"shell": "allow"})["shell"] == "allow"


def test_the_admin_edits_permissions_and_lists_waiting_runs(api, owner):
    owner.is_staff = True
    owner.save()
    owner.user_permissions.set(
        Permission.objects.filter(codename__in=["view_session", "change_session", "view_run"])
    )
    sid = new_session(api, permissions={"write": "ask"})
    run = run_turn(api, sid, "write a.txt x", status="requires_action")
    admin = Client()
    admin.force_login(owner)
    listing = admin.get("/admin/runs_app/run/?waiting=yes").content.decode()
    assert run["id"] in listing and "write" in listing
    change = f"/admin/sessions_app/session/{sid}/change/"
    bad = admin.post(change, {"title": "t", "permissions": '{"write": "perhaps"}'})
    assert bad.status_code == 200 and "allow, ask, deny" in bad.content.decode()
    ok = admin.post(change, {"title": "renamed", "permissions": '{"shell": "deny"}'})
    assert ok.status_code == 302
    stored = Session.objects.get(id=sid)
    assert stored.permissions == {"shell": "deny"} and stored.title == "renamed"
    # Only the edited fields were written: the waiting run still holds the session.
    assert stored.status == "waiting" and stored.busy_run_id == run["id"]


def test_a_fork_of_a_waiting_session_asks_again_there(api):
    sid = new_session(api, permissions={"write": "ask"})
    run = run_turn(api, sid, "write a.txt x", status="requires_action")
    fork = api.post(f"/api/sessions/{sid}/fork/", {}, format="json").json()
    assert fork["status"] == "idle"
    copied = api.get(f"/api/sessions/{fork['id']}/runs/").json()
    assert [r["status"] for r in copied] == ["cancelled"], "no second waiting run"
    # Revert and rollback wait for the decision, as for a busy session.
    assert api.post(f"/api/sessions/{sid}/rollback/", {"num_turns": 1}, "json").status_code == 409
    # In the fork, resume meets the undecided call and asks its owner again.
    resumed = api.post(
        f"/api/sessions/{fork['id']}/runs/", {"mode": "resume", "wait": True}, format="json"
    ).json()
    assert resumed["status"] == "requires_action"
    (call,) = resumed["required_action"]["tool_calls"]
    approve(api, resumed["id"], call["part_id"], "allow")
    assert settled(api, resumed["id"])["status"] == "completed"
    assert (Session.objects.get(id=fork["id"]).worktree / "a.txt").read_text() == "x"
    assert not (Session.objects.get(id=sid).worktree / "a.txt").exists()
    assert Run.objects.get(id=run["id"]).status == "requires_action", "the source still waits"


def test_a_decided_step_whose_close_fails_to_store_is_closed_once(api, monkeypatch):
    """Found by the 30-minute chaos run (parts twice, in pairs): the execution that ran the
    decided calls closed their step, and the checkpoint in that close lost its connection;
    the run's end, not knowing the step closed, closed it again, and both were written."""
    from django.db import OperationalError

    from runs_app.checkpoint import Checkpointer

    sid = new_session(api, permissions={"write": "ask"})
    run = run_turn(api, sid, "write a.txt hello\nsay written", status="requires_action")
    part_id = run["required_action"]["tool_calls"][0]["part_id"]
    original = Checkpointer.flush
    failed = []

    def flush(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        closing = any(p.type == Part.Type.STEP_FINISH for p in self._new_parts)  # noqa: SLF001
        if closing and not failed:
            failed.append(True)
            raise OperationalError("terminating connection due to administrator command")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Checkpointer, "flush", flush)
    approve(api, run["id"], part_id, "allow")
    assert settled(api, run["id"])["status"] == "error" and failed
    step = Part.objects.get(id=part_id).message_id
    assert Part.objects.filter(message_id=step, type=Part.Type.STEP_FINISH).count() == 1
    assert Part.objects.filter(message_id=step, type=Part.Type.PATCH).count() == 1
