"""``GET /api/sessions/{id}/compare/`` (docs/semantics.md §14.1): two points of a session from their
common ancestor — both conversations, the files that differ, one file's diff — through the
real path (scripted runs, continue and an edited first prompt make the branches)."""

from __future__ import annotations

import pytest

from sessions_app.api import branches as shapes
from sessions_app.models import Session
from tests.conftest import all_queries, client_for, new_session, run_turn
from workspace import snapshots

pytestmark = pytest.mark.django_db(transaction=True)


def cont(api, run_id, **body):
    body.setdefault("wait", True)
    response = api.post(f"/api/runs/{run_id}/continue/", body, format="json")
    assert response.status_code in (200, 202), response.content
    assert response.json()["status"] == "completed", response.json()
    return response.json()


def head(sid: str) -> str:
    return Session.objects.get(id=sid).head_id


def compare(api, sid, **query):
    return api.get(f"/api/sessions/{sid}/compare/", query)


def texts(side: dict) -> list[str]:
    return [p["text"] for m in side["messages"] for p in m["parts"] if p["type"] == "text"]


def two_branches(api, sid) -> tuple[dict, str, str, str]:
    """A first turn, then two answers to it: branch A (a normal second turn) and branch B (a
    continue of the first run with another question). The first run, its last message (the
    common ancestor) and the two leaves."""
    first = run_turn(api, sid, "write base.txt base\nwrite same.txt same\nsay one")
    base = head(sid)
    run_turn(api, sid, "write a.txt A\nappend base.txt more\nsay branch a")
    leaf_a = head(sid)
    cont(api, first["id"], input="write b.txt B\nsay branch b")
    leaf_b = head(sid)
    assert leaf_b != leaf_a
    return first, base, leaf_a, leaf_b


def test_it_shows_two_branches_from_their_common_ancestor(api, sid):
    _first, base, leaf_a, leaf_b = two_branches(api, sid)
    response = compare(api, sid, a=leaf_a)  # b: the head, branch B's leaf
    assert response.status_code == 200, response.content
    data = response.json()
    assert data["base"] == base
    assert data["a"]["message_id"] == leaf_a and data["b"]["message_id"] == leaf_b
    assert data["a"]["messages"][0]["parent_id"] == base
    assert data["a"]["messages"][-1]["id"] == leaf_a
    assert data["b"]["messages"][-1]["id"] == leaf_b
    assert texts(data["a"])[-1] == "branch a" and texts(data["b"])[-1] == "branch b"
    assert "one" not in texts(data["a"]) + texts(data["b"]), "the shared turn is not repeated"
    assert not data["a"]["truncated"] and not data["b"]["truncated"]
    assert data["files"] == [
        {"path": "a.txt", "status": "deleted", "additions": 0, "deletions": 1, "binary": False},
        {"path": "b.txt", "status": "added", "additions": 1, "deletions": 0, "binary": False},
        {"path": "base.txt", "status": "modified", "additions": 1, "deletions": 1, "binary": False},
    ]
    assert data["files_truncated"] is False
    # The other way round: the same files, each change turned over.
    back = compare(api, sid, a=leaf_b, b=leaf_a).json()
    assert back["base"] == base
    assert [(f["path"], f["status"]) for f in back["files"]] == [
        ("a.txt", "added"),
        ("b.txt", "deleted"),
        ("base.txt", "modified"),
    ]


def test_it_gives_one_files_diff_from_a_to_b(api, sid):
    _first, _base, leaf_a, leaf_b = two_branches(api, sid)
    data = compare(api, sid, a=leaf_a, b=leaf_b, file="base.txt").json()
    assert data["file"] == "base.txt"
    assert "--- a/base.txt" in data["patch"] and "+++ b/base.txt" in data["patch"]
    assert "-basemore" in data["patch"] and "+base" in data["patch"]
    added = compare(api, sid, a=leaf_a, b=leaf_b, file="b.txt").json()
    assert "+B" in added["patch"] and "new file" in added["patch"]
    same = compare(api, sid, a=leaf_a, b=leaf_b, file="same.txt").json()
    assert same == {"file": "same.txt", "patch": ""}


def test_a_point_and_its_own_later_head_share_everything_before_it(api, sid):
    run_turn(api, sid, "write x.txt 1\nsay one")
    first = head(sid)
    run_turn(api, sid, "write x.txt 2\nsay two")
    data = compare(api, sid, a=first).json()
    assert data["base"] == first
    assert data["a"]["messages"] == []
    roles = [m["role"] for m in data["b"]["messages"]]
    assert roles[0] == "user" and set(roles[1:]) == {"assistant"}
    assert [(f["path"], f["additions"], f["deletions"]) for f in data["files"]] == [("x.txt", 1, 1)]
    itself = compare(api, sid, a=first, b=first).json()
    assert itself["base"] == first and itself["files"] == []


def test_an_edited_first_prompt_has_no_common_ancestor(api, sid):
    first = run_turn(api, sid, "write f.txt one\nsay one")
    leaf_a = head(sid)
    # An edit of the first prompt: a new root (the cut before the first user message).
    cont(api, first["id"], continue_from=0, input="write g.txt two\nsay two")
    data = compare(api, sid, a=leaf_a).json()
    assert data["base"] is None
    assert data["a"]["messages"][0]["parent_id"] is None
    assert data["b"]["messages"][0]["parent_id"] is None
    assert {f["path"]: f["status"] for f in data["files"]} == {
        "f.txt": "deleted",
        "g.txt": "added",
    }


def test_a_pending_revert_changes_nothing(api, sid):
    _first, _base, leaf_a, leaf_b = two_branches(api, sid)
    before = compare(api, sid, a=leaf_a).json()
    boundary = before["b"]["messages"][0]["id"]
    response = api.post(f"/api/sessions/{sid}/revert/", {"message_id": boundary}, format="json")
    assert response.status_code == 200
    assert compare(api, sid, a=leaf_a).json() == before


def test_each_side_is_bounded(api, sid, settings):
    for i in range(3):
        run_turn(api, sid, f"say {i}")
    root = api.get(f"/api/sessions/{sid}/tree/").json()[0]["id"]
    settings.API_PAGE_MAX = 2
    data = compare(api, sid, a=root).json()
    assert data["base"] == root
    assert len(data["b"]["messages"]) == 2 and data["b"]["truncated"] is True
    assert data["b"]["messages"][0]["parent_id"] == root, "from the common ancestor on"
    settings.API_FILES_MAX = 0
    assert compare(api, sid, a=root).json()["files_truncated"] is False  # no files differ


def test_the_file_list_is_bounded(api, sid, settings):
    run_turn(api, sid, "say nothing yet")
    start = head(sid)
    run_turn(api, sid, "write one.txt 1\nwrite two.txt 2\nsay done")
    settings.API_FILES_MAX = 1
    data = compare(api, sid, a=start).json()
    assert [f["path"] for f in data["files"]] == ["one.txt"]
    assert data["files_truncated"] is True


def test_an_outsider_gets_404(api, sid, outsider_api):
    _first, _base, leaf_a, _leaf_b = two_branches(api, sid)
    response = compare(outsider_api, sid, a=leaf_a)
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "NotFound"
    assert compare(client_for(None), sid, a=leaf_a).status_code in (401, 403, 404)


def test_another_sessions_message_is_not_found(api, sid):
    run_turn(api, sid, "say here")
    other = new_session(api)
    run_turn(api, other, "say there")
    theirs = head(other)
    for query in ({"a": theirs}, {"a": head(sid), "b": theirs}, {"a": "msg_nope"}):
        response = compare(api, sid, **query)
        assert response.status_code == 404, query
        assert response.json()["error"]["type"] == "NotFound"
    response = compare(api, sid, a=head(sid), b=theirs, file="x.txt")
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({}, "a: give a message of the session (or `other`: another session)."),
        ({"a": ""}, "a: give a message of the session (or `other`: another session)."),
        ({"a": "m" * 65}, "a: Ensure this field has no more than 64 characters."),
        ({"a": "{head}", "file": ""}, "file must be a path in the worktree."),
        ({"a": "{head}", "file": "../etc/passwd"}, None),
        ({"a": "{head}", "file": "/abs"}, None),
    ],
)
def test_bad_input_is_400(api, sid, query, message):
    run_turn(api, sid, "write a.txt x\nsay ok")
    query = {k: v.replace("{head}", head(sid)) for k, v in query.items()}
    response = compare(api, sid, **query)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["type"] == "ValidationError"
    if message:
        assert error["message"] == message
    else:
        assert error["message"].startswith("file: ")


def test_missing_snapshot_objects_are_404(api, sid, monkeypatch):
    _first, _base, leaf_a, _leaf_b = two_branches(api, sid)

    def lost(*args, **kwargs):
        raise snapshots.MissingObjectError("git: the object is missing")

    monkeypatch.setattr(snapshots.Snapshots, "diff_stat", lost)
    monkeypatch.setattr(snapshots.Snapshots, "diff_text", lost)
    assert compare(api, sid, a=leaf_a).status_code == 404
    assert compare(api, sid, a=leaf_a, file="a.txt").status_code == 404


def test_it_takes_as_many_queries_for_a_long_session(api, settings):
    settings.RUN_LEASE_SECONDS = settings.RUN_ABORT_POLL_SECONDS = 300  # the keeper apart
    counts = []
    for turns in (1, 6):
        sid = new_session(api)
        first, _base, leaf_a, _leaf_b = two_branches(api, sid)
        for i in range(turns):
            run_turn(api, sid, f"write f{i}.txt {i}\nsay {i}")
        with all_queries() as listed:
            assert compare(api, sid, a=leaf_a).status_code == 200
        with all_queries() as one_file:
            assert compare(api, sid, a=leaf_a, file="a.txt").status_code == 200
        counts.append((len(listed), len(one_file)))
    assert counts[0] == counts[1], counts
    assert counts[0][0] <= 8, counts


def test_the_answer_is_the_declared_shape(api, sid):
    _first, _base, leaf_a, _leaf_b = two_branches(api, sid)
    data = compare(api, sid, a=leaf_a).json()
    assert set(data) == set(shapes.CompareOut().fields)
    across = {"session_id", "base"}  # side b's, with `other` only
    assert set(data["a"]) == set(data["b"]) == set(shapes.CompareSideOut().fields) - across
    assert set(data["files"][0]) == set(shapes.CompareFileOut().fields)
    patch = compare(api, sid, a=leaf_a, file="a.txt").json()
    assert set(patch) == set(shapes.FileDiffOut().fields)
    schema = api.get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/sessions/{session_id}/compare/"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"a", "b", "file", "other"}


# -- a session and another that shares its history (a fork, its source, a sibling) ---------------


def fork(api, sid, **body) -> str:
    response = api.post(f"/api/sessions/{sid}/fork/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def test_a_fork_is_compared_with_its_source_from_the_fork_point(api, sid):
    run_turn(api, sid, "write base.txt base\nwrite same.txt same\nsay one")
    fork_point = head(sid)
    child = fork(api, sid)
    run_turn(api, sid, "write source.txt S\nappend base.txt in source\nsay in the source")
    run_turn(api, child, "write child.txt C\nsay in the fork")
    response = compare(api, sid, other=child)
    assert response.status_code == 200, response.content
    data = response.json()
    # The common ancestor is the fork point, named in each session.
    assert data["base"] == fork_point
    assert data["b"]["session_id"] == child
    copies = Session.objects.get(id=child).messages.values_list("id", flat=True)
    assert data["b"]["base"] in set(copies) and data["b"]["base"] != fork_point
    assert data["b"]["messages"][0]["parent_id"] == data["b"]["base"]
    assert texts(data["a"])[-1] == "in the source" and texts(data["b"])[-1] == "in the fork"
    assert data["a"]["message_id"] == head(sid) and data["b"]["message_id"] == head(child)
    assert {f["path"]: f["status"] for f in data["files"]} == {
        "source.txt": "deleted",
        "base.txt": "modified",
        "child.txt": "added",
    }
    patch = compare(api, sid, other=child, file="base.txt").json()["patch"]
    assert "-basein source" in patch and "+base" in patch
    # The other way round: the fork's point of view.
    back = compare(api, child, other=sid).json()
    assert back["base"] == data["b"]["base"] and back["b"]["base"] == fork_point
    assert {f["path"]: f["status"] for f in back["files"]}["child.txt"] == "deleted"


def test_two_forks_of_one_session_share_their_fork_point(api, sid):
    run_turn(api, sid, "write base.txt base\nsay one")
    run_turn(api, sid, "say two")
    first = fork(api, sid)
    second = fork(api, sid)
    run_turn(api, first, "write one.txt 1\nsay first fork")
    run_turn(api, second, "write two.txt 2\nsay second fork")
    data = compare(api, first, other=second).json()
    # Both copies of the source's last message: the common ancestor is the fork point.
    assert data["base"] is not None and data["b"]["base"] is not None
    assert texts(data["a"])[0] == "write one.txt 1\nsay first fork"
    assert texts(data["b"])[0] == "write two.txt 2\nsay second fork"
    assert {f["path"] for f in data["files"]} == {"one.txt", "two.txt"}


def test_a_fork_from_an_earlier_point_shares_only_what_precedes_it(api, sid):
    run_turn(api, sid, "write a.txt a\nsay one")
    early = head(sid)
    run_turn(api, sid, "write b.txt b\nsay two")
    child = fork(api, sid, message_id=early)
    data = compare(api, sid, other=child).json()
    assert data["base"] == early
    assert texts(data["a"]) == ["write b.txt b\nsay two", "two"]
    assert data["b"]["messages"] == []
    assert [f["path"] for f in data["files"]] == ["b.txt"]


def test_unrelated_sessions_compare_from_their_start(api, sid):
    run_turn(api, sid, "write a.txt a\nsay here")
    other = new_session(api)
    run_turn(api, other, "write b.txt b\nsay there")
    data = compare(api, sid, other=other).json()
    assert data["base"] is None and data["b"]["base"] is None
    assert {f["path"] for f in data["files"]} == {"a.txt", "b.txt"}


def test_another_users_session_is_not_found(api, sid, outsider_api):
    run_turn(api, sid, "say mine")
    theirs = new_session(outsider_api)
    run_turn(outsider_api, theirs, "write secret.txt s\nsay theirs")
    response = compare(api, sid, other=theirs)
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "NotFound"
    assert compare(api, sid, other=theirs, file="secret.txt").status_code == 404
    # And the outsider cannot reach mine through theirs.
    assert compare(outsider_api, theirs, other=sid).status_code == 404


def test_a_point_of_this_session_is_not_taken_for_the_others(api, sid):
    run_turn(api, sid, "say here")
    child = fork(api, sid)
    response = compare(api, sid, other=child, b=head(sid))
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "b: no such message in the other session."


def test_across_sessions_the_queries_do_not_grow_with_the_history(api, sid, settings):
    settings.RUN_LEASE_SECONDS = settings.RUN_ABORT_POLL_SECONDS = 300
    counts = []
    for turns in (1, 6):
        sid = new_session(api)
        for i in range(turns):
            run_turn(api, sid, f"write f{i}.txt {i}\nsay {i}")
        child = fork(api, sid)
        run_turn(api, child, "write c.txt c\nsay c")
        with all_queries() as listed:
            assert compare(api, sid, other=child).status_code == 200
        counts.append(len(listed))
    assert counts[0] == counts[1], counts
