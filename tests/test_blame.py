"""Blame (issue 27 item 4, docs/semantics.md §14.4): each run of a file's lines at a point of the
session, with the tool call whose step last changed it, read from the snapshots."""

from __future__ import annotations

import io
import zipfile

import pytest

from sessions_app.models import Message, Part

from .conftest import new_session, run_turn

pytestmark = pytest.mark.django_db(transaction=True)


def blame(api, sid: str, path: str, message_id: str | None = None):  # noqa: ANN001, ANN201
    query = f"?message_id={message_id}" if message_id else ""
    return api.get(f"/api/sessions/{sid}/blame/{path}{query}")


def tool_call(run: dict, tool: str, content: str) -> Part:
    """The run's tool part that called ``tool`` with ``content``."""
    return next(
        p
        for p in Part.objects.filter(message__run_id=run["id"], type="tool", tool=tool)
        if (p.state["input"].get("content") or "").rstrip("\n") == content
    )


def line(start: int, end: int, part: Part | None) -> dict:
    if part is None:
        return {"start": start, "end": end, "message_id": None, "part_id": None, "run_id": None}
    run_id = Message.objects.get(id=part.message_id).run_id
    return {
        "start": start,
        "end": end,
        "message_id": part.message_id,
        "part_id": part.id,
        "run_id": run_id,
    }


def ids(runs: list[dict]) -> list[dict]:
    keys = ("start", "end", "message_id", "part_id", "run_id")
    return [{k: r[k] for k in keys} for r in runs]


def test_it_puts_the_lines_of_three_turns_on_their_tool_calls(api, sid):
    first = run_turn(api, sid, "append a.txt one\nappend b.txt x\nappend a.txt two")
    second = run_turn(api, sid, "append a.txt three")
    third = run_turn(api, sid, "say more\nappend a.txt four\nappend a.txt five")
    response = blame(api, sid, "a.txt")
    assert response.status_code == 200, response.json()
    # A step with several calls: its lines go to its last call that names the file.
    assert ids(response.json()) == [
        line(1, 2, tool_call(first, "append", "two")),
        line(3, 3, tool_call(second, "append", "three")),
        line(4, 5, tool_call(third, "append", "five")),
    ]
    runs = response.json()
    assert runs[0]["tool"] == "append" and runs[0]["step"] == 0
    assert runs[2]["created_at"] and runs[2]["position"] > runs[1]["position"] > runs[0]["position"]


def test_a_line_changed_twice_goes_to_the_later_change(api, sid):
    run_turn(api, sid, "write a.txt first")
    later = run_turn(api, sid, "write a.txt second")
    assert ids(blame(api, sid, "a.txt").json()) == [line(1, 1, tool_call(later, "write", "second"))]


def test_it_follows_every_step_exactly_as_git_blame_does(api, sid):
    from bench.branches import build_history, contents, floor_blame, floor_repo, per_line
    from sessions_app.models import Session

    files = contents(lines=300, steps=25, seed=5)
    tool_parts = build_history(Session.objects.get(id=sid), files, path="src/f.txt")
    runs = blame(api, sid, "src/f.txt").json()
    assert runs[-1]["end"] == len(files[-1].splitlines())
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as scratch:
        expected = floor_blame(floor_repo(files, Path(scratch), path="src/f.txt"), path="src/f.txt")
    assert per_line(runs, tool_parts) == expected
    assert len(set(expected)) > 10  # many steps' lines, not one


def test_blame_at_an_older_message_of_another_branch(api, sid):
    first = run_turn(api, sid, "append a.txt one")
    second = run_turn(api, sid, "append a.txt two")
    other_end = Message.objects.filter(run_id=second["id"]).order_by("-id").first().id
    # A branch from the first answer: a.txt is "one" again, then gets another line.
    branch = api.post(
        f"/api/runs/{first['id']}/continue/",
        {"input": "append a.txt other", "wait": True},
        format="json",
    ).json()
    assert branch["status"] == "completed"
    one = tool_call(first, "append", "one")
    assert ids(blame(api, sid, "a.txt").json()) == [
        line(1, 1, one),
        line(2, 2, tool_call(branch, "append", "other")),
    ]
    at_other = blame(api, sid, "a.txt", message_id=other_end)
    assert ids(at_other.json()) == [line(1, 1, one), line(2, 2, tool_call(second, "append", "two"))]
    first_end = Message.objects.filter(run_id=first["id"]).order_by("-id").first().id
    assert ids(blame(api, sid, "a.txt", message_id=first_end).json()) == [line(1, 1, one)]


def test_an_applied_revert_leaves_only_the_kept_and_the_new_lines(api, sid):
    first = run_turn(api, sid, "append a.txt one")
    run_turn(api, sid, "append a.txt two")
    turn_2 = Message.objects.filter(session_id=sid, role="user").order_by("id")[1]
    reverted = api.post(f"/api/sessions/{sid}/revert/", {"message_id": turn_2.id}, format="json")
    assert reverted.status_code == 200
    one = tool_call(first, "append", "one")
    # Pending: the head's point stops before the boundary.
    assert ids(blame(api, sid, "a.txt").json()) == [line(1, 1, one)]
    third = run_turn(api, sid, "append a.txt three")  # cleans the reverted turn up first
    assert ids(blame(api, sid, "a.txt").json()) == [
        line(1, 1, one),
        line(2, 2, tool_call(third, "append", "three")),
    ]


def _zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, body in members.items():
            archive.writestr(name, body)
    return out.getvalue()


def _upload(api, members: dict[str, bytes]) -> str:  # noqa: ANN001
    from django.core.files.uploadedfile import SimpleUploadedFile

    answer = api.post(
        "/api/sessions/upload/", {"file": SimpleUploadedFile("proj.zip", _zip(members))}
    )
    assert answer.status_code == 201, answer.json()
    return answer.json()["id"]


def test_the_lines_of_an_uploaded_session_s_first_snapshot_are_before_the_session(api):
    sid = _upload(api, {"proj/a.txt": b"u1\nu2\n", "proj/logo.bin": b"\x89PNG\0\0\x01"})
    assert ids(blame(api, sid, "proj/a.txt").json()) == [line(1, 2, None)]
    turn = run_turn(api, sid, "append proj/a.txt mine")
    assert ids(blame(api, sid, "proj/a.txt").json()) == [
        line(1, 2, None),
        line(3, 3, tool_call(turn, "append", "mine")),
    ]
    binary = blame(api, sid, "proj/logo.bin")
    assert binary.status_code == 400
    assert "binary" in binary.json()["error"]["message"]
    directory = blame(api, sid, "proj")  # a directory is not a file
    assert directory.status_code == 404


def test_a_missing_file_or_point_is_a_404_and_a_bad_path_a_400(api, sid):
    run_turn(api, sid, "append a.txt one")
    assert blame(api, sid, "b.txt").status_code == 404
    assert blame(api, sid, "a.txt", message_id="msg_nope").status_code == 404
    empty = new_session(api)
    assert blame(api, empty, "a.txt").status_code == 404
    assert blame(api, sid, "x/../a.txt").status_code == 400


def test_an_outsider_gets_a_404(api, outsider_api, sid):
    run_turn(api, sid, "append a.txt one")
    answer = blame(outsider_api, sid, "a.txt")
    assert answer.status_code == 404
    assert answer.json()["error"]["type"] == "NotFound"


def test_a_name_with_odd_characters_is_blamed_like_any_other(api, sid):
    from urllib.parse import quote

    name = "dir/<img_src=x_onerror=5>é#1?.txt"  # one word: the script takes it as the path
    turn = run_turn(api, sid, f"append {name} one")
    answer = api.get(f"/api/sessions/{sid}/blame/{quote(name)}")
    assert answer.status_code == 200, answer.json()
    assert ids(answer.json()) == [line(1, 1, tool_call(turn, "append", "one"))]


def test_an_applied_step_s_lines_go_to_the_applied_change(api, sid):
    first = run_turn(api, sid, "append a.txt one")
    other = run_turn(api, sid, "append a.txt two")
    step = tool_call(other, "append", "two")
    branch = api.post(
        f"/api/runs/{first['id']}/continue/",
        {"input": "append b.txt x", "wait": True},
        format="json",
    ).json()
    assert branch["status"] == "completed"
    applied = api.post(f"/api/sessions/{sid}/apply/", {"part_id": step.id}, format="json")
    assert applied.status_code == 200, applied.json()
    runs = blame(api, sid, "a.txt").json()
    assert ids(runs)[0] == line(1, 1, tool_call(first, "append", "one"))
    part = Part.objects.get(message_id=runs[1]["message_id"], type="applied")
    assert (runs[1]["start"], runs[1]["part_id"], runs[1]["tool"]) == (2, part.id, "applied")
    assert part.data["source_part_id"] == step.id  # where the line came from
