"""Apply (issue 27 item 2, docs/semantics.md §14.2): one tool step's change, or a whole turn's,
taken from another branch or from a fork onto the head, three-way; conflicts named per file,
refused by default or written with markers; a history event that a revert undoes."""

from __future__ import annotations

import pytest

from sessions_app.models import HistoryEvent, Message, Part, Session

from .conftest import new_session, run_turn

pytestmark = pytest.mark.django_db(transaction=True)


def cont(api, run_id: str, **body) -> dict:  # noqa: ANN001, ANN003
    body.setdefault("wait", True)
    answer = api.post(f"/api/runs/{run_id}/continue/", body, format="json")
    assert answer.status_code in (200, 201), answer.json()
    return answer.json()


def tool_part(run_id: str, path: str) -> Part:
    return next(
        p
        for p in Part.objects.filter(message__run_id=run_id, type="tool").order_by("id")
        if (p.state or {}).get("input", {}).get("path") == path
    )


def files(sid: str) -> dict[str, str]:
    root = Session.objects.get(id=sid).worktree
    return {
        p.relative_to(root).as_posix(): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


@pytest.fixture
def branches(api) -> tuple[str, dict, dict, dict]:  # noqa: ANN001
    """A session with a base turn, branch X (b.txt, and a.txt rewritten) and then branch Y
    (c.txt) as the head, both from the base turn."""
    sid = new_session(api)
    base = run_turn(api, sid, "write a.txt base")
    x = run_turn(api, sid, "Branch X\nwrite b.txt from-x\nwrite a.txt x-version")
    y = cont(api, base["id"], input="Branch Y\nwrite c.txt from-y")
    assert files(sid) == {"a.txt": "base", "c.txt": "from-y"}
    return sid, base, x, y


def test_a_step_from_another_branch_is_applied_onto_the_head_and_revert_undoes_it(api, branches):
    sid, _base, x, _y = branches
    step = tool_part(x["id"], "b.txt")
    answer = api.post(
        f"/api/sessions/{sid}/apply/", {"part_id": step.id, "scope": "step"}, format="json"
    )
    assert answer.status_code == 200, answer.json()
    result = answer.json()
    # The step wrote b.txt and a.txt (one tool-batch step): both come, three-way clean
    # (a call's own file only without scope "step": tests/test_apply_call.py).
    assert sorted(result["applied"]) == ["a.txt", "b.txt"] and result["conflicts"] == []
    assert files(sid) == {"a.txt": "x-version", "b.txt": "from-x", "c.txt": "from-y"}
    # The history event: a message on the head's path whose applied part names the source.
    session = Session.objects.get(id=sid)
    event = Message.objects.get(id=result["message_id"])
    assert session.head_id == event.id
    applied = event.parts.get(type="applied")
    assert applied.data["source_part_id"] == step.id
    assert applied.data["source_session_id"] == sid
    assert HistoryEvent.objects.filter(session_id=sid, kind="apply").exists()
    # Revert to it undoes it; unrevert brings it back.
    assert (
        api.post(
            f"/api/sessions/{sid}/revert/", {"message_id": event.id}, format="json"
        ).status_code
        == 200
    )
    assert files(sid) == {"a.txt": "base", "c.txt": "from-y"}
    assert api.post(f"/api/sessions/{sid}/unrevert/").status_code == 200
    assert files(sid) == {"a.txt": "x-version", "b.txt": "from-x", "c.txt": "from-y"}
    # The next turn works on the applied files.
    run_turn(api, sid, "append b.txt more")
    assert files(sid)["b.txt"] == "from-xmore\n"


def test_a_conflict_is_refused_by_default_and_written_with_markers_when_asked(api):
    sid = new_session(api)
    base = run_turn(api, sid, "write a.txt base")
    x = run_turn(api, sid, "write a.txt from-x")
    cont(api, base["id"], input="write a.txt from-y")
    step = tool_part(x["id"], "a.txt")
    refused = api.post(f"/api/sessions/{sid}/apply/", {"part_id": step.id}, format="json")
    assert refused.status_code == 409
    assert refused.json()["error"]["type"] == "ConflictError"
    assert "a.txt" in refused.json()["error"]["message"]
    assert files(sid) == {"a.txt": "from-y"}
    assert not HistoryEvent.objects.filter(session_id=sid, kind="apply").exists()
    marked = api.post(
        f"/api/sessions/{sid}/apply/",
        {"part_id": step.id, "on_conflict": "markers"},
        format="json",
    )
    assert marked.status_code == 200, marked.json()
    assert marked.json()["conflicts"] == ["a.txt"]
    text = files(sid)["a.txt"]
    assert "<<<<<<<" in text and "from-x" in text and "from-y" in text and ">>>>>>>" in text


def test_a_whole_turn_is_applied_by_its_message(api, branches):
    sid, _base, x, _y = branches
    x_user = Message.objects.filter(run_id=x["id"], role="user").first()
    answer = api.post(f"/api/sessions/{sid}/apply/", {"message_id": x_user.id}, format="json")
    assert answer.status_code == 200, answer.json()
    assert files(sid) == {"a.txt": "x-version", "b.txt": "from-x", "c.txt": "from-y"}


def test_a_step_of_a_fork_is_applied_onto_its_source(api):
    sid = new_session(api)
    run_turn(api, sid, "write a.txt base")
    fork = api.post(f"/api/sessions/{sid}/fork/", {}, format="json").json()
    in_fork = run_turn(api, fork["id"], "write d.txt from-the-fork")
    step = tool_part(in_fork["id"], "d.txt")
    answer = api.post(f"/api/sessions/{sid}/apply/", {"part_id": step.id}, format="json")
    assert answer.status_code == 200, answer.json()
    assert files(sid) == {"a.txt": "base", "d.txt": "from-the-fork"}
    applied = Message.objects.get(id=answer.json()["message_id"]).parts.get(type="applied")
    assert applied.data["source_session_id"] == fork["id"]


def test_nobody_applies_from_or_onto_a_session_not_theirs(api, outsider_api, branches):
    sid, _base, x, _y = branches
    step = tool_part(x["id"], "b.txt")
    theirs = new_session(outsider_api)
    run_turn(outsider_api, theirs, "write z.txt theirs")
    their_step = tool_part(
        Message.objects.filter(session_id=theirs, role="assistant").first().run_id, "z.txt"
    )
    # Their part onto my session, my part onto their session: 404 both ways.
    assert (
        api.post(f"/api/sessions/{sid}/apply/", {"part_id": their_step.id}, format="json")
    ).status_code == 404
    assert (
        outsider_api.post(f"/api/sessions/{theirs}/apply/", {"part_id": step.id}, format="json")
    ).status_code == 404
    assert (
        outsider_api.post(f"/api/sessions/{sid}/apply/", {"part_id": step.id}, format="json")
    ).status_code == 404
    assert files(theirs) == {"z.txt": "theirs"}


@pytest.mark.parametrize(
    "body",
    [{}, {"part_id": "prt_nope"}, {"part_id": "x", "message_id": "y"}, {"on_conflict": "merge"}],
)
def test_bad_input_is_a_sentence(api, branches, body):
    sid = branches[0]
    answer = api.post(f"/api/sessions/{sid}/apply/", body, format="json")
    assert answer.status_code in (400, 404), answer.json()
    assert answer.json()["error"]["message"]


def test_a_non_tool_part_or_a_pending_revert_is_refused(api, branches):
    sid, base, x, _y = branches
    text = Part.objects.filter(message__run_id=x["id"], type="text").first()
    assert (
        api.post(f"/api/sessions/{sid}/apply/", {"part_id": text.id}, format="json").status_code
        == 400
    )
    first = Message.objects.filter(session_id=sid, role="user").order_by("id").first()
    api.post(f"/api/sessions/{sid}/revert/", {"message_id": first.id}, format="json")
    step = tool_part(x["id"], "b.txt")
    pending = api.post(f"/api/sessions/{sid}/apply/", {"part_id": step.id}, format="json")
    assert pending.status_code == 409
