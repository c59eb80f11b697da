"""Alternatives and adopt (issue 27 item 3, docs/semantics.md §14.3): N forks of a turn running the
same input at once, each with its own worktree; quotas counted for all N before anything
starts; one adopted back as a new branch (its messages under new ids, its files, the head)."""

from __future__ import annotations

import pytest

from quotas_app.models import Quota
from runs_app.models import Run
from sessions_app.models import HistoryEvent, Message, Part, Session

from .conftest import new_session, run_turn, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def files(sid: str) -> dict[str, str]:
    root = Session.objects.get(id=sid).worktree
    return {
        p.relative_to(root).as_posix(): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def ended(sids: list[str]) -> bool:
    return not Run.objects.filter(session_id__in=sids).exclude(status__in=Run.TERMINAL).exists()


@pytest.fixture
def turned(api) -> tuple[str, Message]:  # noqa: ANN001
    sid = new_session(api, title="Work")
    run_turn(api, sid, "write base.txt 1")
    run_turn(api, sid, "Make it\nwrite out.txt made\nsay done")
    second = Message.objects.filter(session_id=sid, role="user").order_by("id").last()
    return sid, second


def test_n_alternatives_run_the_turn_again_each_in_its_own_worktree(api, turned):
    sid, second = turned
    answer = api.post(
        f"/api/sessions/{sid}/alternatives/", {"message_id": second.id, "n": 3}, format="json"
    )
    assert answer.status_code == 201, answer.json()
    result = answer.json()
    assert len(result["sessions"]) == 3 and result["group"].startswith("alt_")
    wait_until(lambda: ended(result["sessions"]), timeout=60)
    for i, alt in enumerate(result["sessions"], start=1):
        row = Session.objects.get(id=alt)
        assert row.lineage_kind == "alternative" and row.alternative_group == result["group"]
        assert row.forked_from_session_id == sid
        assert row.title == f"Work — alternative {i} of 3"
        assert files(alt) == {"base.txt": "1", "out.txt": "made"}
        texts = [
            "".join(p.text for p in m.parts.filter(type="text"))
            for m in Message.objects.filter(session_id=alt, role="user").order_by("id")
        ]
        assert texts == ["write base.txt 1", "Make it\nwrite out.txt made\nsay done"]
    lineage = api.get(f"/api/sessions/{sid}/lineage/").json()
    assert {f["lineage_kind"] for f in lineage["forks"]} == {"alternative"}
    assert HistoryEvent.objects.filter(session_id=sid, kind="alternatives").exists()


def test_another_input_runs_after_the_message(api, turned):
    sid, second = turned
    answer = api.post(
        f"/api/sessions/{sid}/alternatives/",
        {
            "message_id": second.id,
            "n": 2,
            "messages": [{"role": "user", "content": "write x.txt y"}],
        },
        format="json",
    )
    assert answer.status_code == 201, answer.json()
    alts = answer.json()["sessions"]
    wait_until(lambda: ended(alts), timeout=60)
    assert files(alts[0]) == {"base.txt": "1", "x.txt": "y"}


def test_quotas_count_every_alternative_and_nothing_starts_past_them(api, owner, turned):
    sid, second = turned
    held = Session.objects.filter(owner=owner).count()
    Quota.objects.create(user=owner, sessions=held + 2)
    answer = api.post(
        f"/api/sessions/{sid}/alternatives/", {"message_id": second.id, "n": 3}, format="json"
    )
    assert answer.status_code == 429
    assert "quota allows" in answer.json()["error"]["message"]
    assert Session.objects.filter(owner=owner).count() == held


@pytest.mark.parametrize("body", [{"n": 1}, {"n": 9}, {"n": "3"}, {}])
def test_bad_input_is_a_sentence(api, turned, body):
    sid, second = turned
    answer = api.post(
        f"/api/sessions/{sid}/alternatives/", {"message_id": second.id, **body}, format="json"
    )
    assert answer.status_code == 400, answer.json()


def test_an_outsider_gets_404(outsider_api, turned):
    sid, second = turned
    answer = outsider_api.post(
        f"/api/sessions/{sid}/alternatives/", {"message_id": second.id, "n": 2}, format="json"
    )
    assert answer.status_code == 404


def test_adopt_makes_an_alternative_a_branch_with_its_files_and_the_head(api, turned):
    sid, second = turned
    alts = api.post(
        f"/api/sessions/{sid}/alternatives/",
        {
            "message_id": second.id,
            "n": 2,
            "messages": [{"role": "user", "content": "write z.txt kept"}],
        },
        format="json",
    ).json()["sessions"]
    wait_until(lambda: ended(alts), timeout=60)
    before_head = Session.objects.get(id=sid).head_id
    answer = api.post(f"/api/sessions/{sid}/adopt/", {"session_id": alts[1]}, format="json")
    assert answer.status_code == 200, answer.json()
    session = Session.objects.get(id=sid)
    assert session.head_id != before_head
    # The input ran after the user message (before its answer): its answer's out.txt is not
    # in the alternative.
    assert files(sid) == {"base.txt": "1", "z.txt": "kept"}
    # The adopted messages hang under the fork point, under new ids, naming their originals.
    adopted = Message.objects.filter(session_id=sid).order_by("id")
    head = adopted.get(id=session.head_id)
    part = Part.objects.filter(message__session_id=sid, type="tool").order_by("id").last()
    assert part.data["adopted_from"]["session_id"] == alts[1]
    assert not Message.objects.filter(id=part.data["adopted_from"]["message_id"], session_id=sid)
    path_ids = []
    node = head
    while node is not None:
        path_ids.append(node.id)
        node = node.parent
    assert second.id in path_ids and before_head not in path_ids  # a branch at the message
    # Its runs came along, counted as the fork's own (once).
    copied = Run.objects.filter(session_id=sid, forked_from_session_id=alts[1])
    assert copied.count() == 1
    assert HistoryEvent.objects.filter(session_id=sid, kind="adopt").exists()
    # The fork stays; a revert to the adopted turn undoes its files.
    assert Session.objects.filter(id=alts[1]).exists()
    user_turn = Message.objects.filter(session_id=sid, role="user").order_by("id").last()
    api.post(f"/api/sessions/{sid}/revert/", {"message_id": user_turn.id}, format="json")
    assert files(sid) == {"base.txt": "1"}


def test_adopt_refuses_a_running_fork_and_a_session_that_is_no_fork(api, turned):
    sid, second = turned
    other = new_session(api)
    assert (
        api.post(f"/api/sessions/{sid}/adopt/", {"session_id": other}, format="json").status_code
        == 404
    )
    slow = api.post(
        f"/api/sessions/{sid}/alternatives/",
        {"message_id": second.id, "n": 2, "messages": [{"role": "user", "content": "wait 3"}]},
        format="json",
    ).json()["sessions"]
    assert (
        api.post(f"/api/sessions/{sid}/adopt/", {"session_id": slow[0]}, format="json").status_code
        == 409
    )
    wait_until(lambda: ended(slow), timeout=60)
