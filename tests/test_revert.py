from __future__ import annotations

import concurrent.futures
import subprocess

import pytest
from django.db import connection

from realtime import events
from runs_app.execution.loop import start as loop_start
from runs_app.models import Run
from sessions_app.models import HistoryEvent, Message, Part, Session
from sessions_app.selectors import active_path
from tests.conftest import run_turn, wait_until
from tests.support.planting import planted

pytestmark = pytest.mark.django_db(transaction=True)


def user_messages(sid):
    return list(Message.objects.filter(session_id=sid, role="user").order_by("id"))


def files(root):
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def revert(api, sid, message_id, part_id=None):
    body = {"message_id": message_id}
    if part_id:
        body["part_id"] = part_id
    return api.post(f"/api/sessions/{sid}/revert/", body, format="json")


@pytest.mark.parametrize(
    ("scripts", "states"),
    [
        (
            ["write a.txt A1", "write b.txt B1", "write c.txt C1"],
            [{}, {"a.txt": b"A1"}, {"a.txt": b"A1", "b.txt": b"B1"}],
        ),
        (
            ["write f.txt v1", "write f.txt v2", "write f.txt v3"],
            [{}, {"f.txt": b"v1"}, {"f.txt": b"v2"}],
        ),
    ],
)
def test_revert_moves_between_turns_and_unrevert_is_exact(api, sid, scripts, states):
    for script in scripts:
        run_turn(api, sid, script)
    worktree = Session.objects.get(id=sid).worktree
    final = files(worktree)
    users = user_messages(sid)
    for user, expected in zip(users, states, strict=True):
        response = revert(api, sid, user.id)
        assert response.status_code == 200
        assert response.json()["revert"]["message_id"] == user.id
        assert files(worktree) == expected
    for user, expected in reversed(list(zip(users, states, strict=True))):
        revert(api, sid, user.id)
        assert files(worktree) == expected
    assert api.post(f"/api/sessions/{sid}/unrevert/").json()["revert"] is None
    assert files(worktree) == final
    assert Message.objects.filter(session_id=sid).count() == 9, "revert deletes nothing"
    kinds = list(HistoryEvent.objects.filter(session_id=sid).values_list("kind", flat=True))
    assert kinds == ["revert"] * 6 + ["unrevert"]


def test_revert_restores_deleted_and_removes_created_files_only(api, sid):
    worktree = Session.objects.get(id=sid).worktree
    (worktree / "mine.txt").write_text("the user's own file")
    subprocess.run(["git", "init", "-q"], cwd=worktree, check=True)
    (worktree / "keep.bin").write_bytes(b"\x00\x01binary")
    run_turn(api, sid, "write old.txt original\nwrite nested/dir/ünï名.txt x")
    run_turn(
        api, sid, "delete old.txt\nwrite deep/a/b/c/" + "n" * 120 + ".txt long\nwrite keep.bin bin2"
    )
    (worktree / "mine.txt").write_text("edited by the user, not the agent")
    second = user_messages(sid)[1]
    body = revert(api, sid, second.id).json()
    assert files(worktree) == {
        "mine.txt": b"edited by the user, not the agent",
        "keep.bin": b"\x00\x01binary",
        "old.txt": b"original",
        "nested/dir/ünï名.txt": b"x",
    }
    assert not (worktree / "deep").exists() or not any((worktree / "deep").rglob("*.txt"))
    assert (worktree / ".git" / "HEAD").exists()
    assert len(body["revert"]["changes"]) == 3
    api.post(f"/api/sessions/{sid}/unrevert/")
    assert not (worktree / "old.txt").exists()
    assert (worktree / "keep.bin").read_bytes() == b"bin2"


def test_the_revert_changes_match_git_numstat(api, sid):
    run_turn(api, sid, "write a.txt one\nappend a.txt two")
    run_turn(api, sid, "append a.txt three\nwrite b.txt x")
    session = Session.objects.get(id=sid)
    body = revert(api, sid, user_messages(sid)[1].id).json()
    pre = body["revert"]["snapshot"]
    env = {"GIT_DIR": str(session.snapshot_dir), "GIT_WORK_TREE": str(session.worktree)}
    subprocess.run(["git", "add", "-A"], cwd=session.worktree, env=env, check=True)
    now = subprocess.run(
        ["git", "write-tree"], cwd=session.worktree, env=env, capture_output=True, text=True
    ).stdout.strip()
    numstat = subprocess.run(
        ["git", "diff-tree", "-r", "--numstat", pre, now],
        cwd=session.worktree,
        env=env,
        capture_output=True,
        text=True,
    ).stdout.split("\n")
    rows = [line.split("\t") for line in numstat if line]
    changes = body["revert"]["changes"]
    assert {
        "additions": sum(c["additions"] for c in changes),
        "deletions": sum(c["deletions"] for c in changes),
        "files": len(changes),
    } == {
        "additions": sum(int(r[0]) for r in rows),
        "deletions": sum(int(r[1]) for r in rows),
        "files": len(rows),
    }
    assert "-three" in body["revert"]["diff"].splitlines()
    assert len(changes) == 2
    # The session's summary stays the totals of its Changes: the first turn's a.txt.
    assert body["summary"] == {"additions": 1, "deletions": 0, "files": 1}


def test_a_part_level_revert_keeps_the_earlier_parts(api, sid):
    run_turn(api, sid, "say before\nwrite a.txt x")
    worktree = Session.objects.get(id=sid).worktree
    step = Message.objects.filter(session_id=sid, role="assistant").order_by("id").first()
    tool = Part.objects.get(message=step, type="tool")
    body = revert(api, sid, step.id, tool.id).json()
    assert body["revert"]["message_id"] == step.id and body["revert"]["part_id"] == tool.id
    assert not (worktree / "a.txt").exists()
    cleaned = api.post(f"/api/sessions/{sid}/cleanup/").json()
    assert cleaned["revert"] is None and cleaned["head_message_id"] == step.id
    assert [p.type for p in Part.objects.filter(message=step).order_by("order")] == [
        "step-start",
        "text",
    ]
    assert Message.objects.filter(session_id=sid).count() == 2
    assert api.post(f"/api/sessions/{sid}/unrevert/").json()["revert"] is None
    assert not (worktree / "a.txt").exists(), "unrevert after cleanup does nothing"


def test_a_part_without_earlier_text_or_tool_falls_back_to_the_turn(api, sid):
    run_turn(api, sid, "say hi")
    step = Message.objects.get(session_id=sid, role="assistant")
    text = Part.objects.get(message=step, type="text")
    body = revert(api, sid, step.id, text.id).json()
    user = user_messages(sid)[0]
    assert body["revert"]["message_id"] == user.id and body["revert"]["part_id"] is None
    cleaned = api.post(f"/api/sessions/{sid}/cleanup/").json()
    assert cleaned["head_message_id"] is None
    assert not Message.objects.filter(session_id=sid).exists()


def test_cleanup_without_a_revert_changes_nothing(api, sid):
    run_turn(api, sid, "say hi")
    before = Session.objects.get(id=sid).head_id
    assert api.post(f"/api/sessions/{sid}/cleanup/").json()["head_message_id"] == before
    assert Message.objects.filter(session_id=sid).count() == 2


def test_a_new_prompt_confirms_a_pending_revert(api, sid):
    run_turn(api, sid, "write a.txt one")
    run_turn(api, sid, "write a.txt two")
    worktree = Session.objects.get(id=sid).worktree
    revert(api, sid, user_messages(sid)[1].id)
    assert (worktree / "a.txt").read_text() == "one"
    run_turn(api, sid, "say next")
    session = Session.objects.get(id=sid)
    assert session.revert is None
    texts = [
        "".join(p.text for p in m.loaded_parts if p.type == "text") for m in active_path(session)
    ]
    assert texts == ["write a.txt one", "", "done", "say next", "next"]
    assert (worktree / "a.txt").read_text() == "one"


def test_a_prompt_over_a_revert_confirms_it_in_the_prompt_s_own_transaction(api, sid, monkeypatch):
    """docs/semantics.md §1.3: the revert's confirmation and the new prompt are stored together. A
    reader between the two saw the reverted turns gone and the prompt not there yet (an empty chat
    with "later branches", in a CI run of the browser tests); now the cleanup's events go out
    once the prompt is stored too, and a prompt that fails to be written leaves the revert
    pending, nothing deleted."""
    run_turn(api, sid, "say one")
    run_turn(api, sid, "say two")
    revert(api, sid, user_messages(sid)[1].id)

    seen: list[tuple[str, bool]] = []
    reader = concurrent.futures.ThreadPoolExecutor(1)
    original = events.publisher.publish

    def prompt_stored() -> bool:
        try:
            return Part.objects.filter(session_id=sid, text="say next").exists()
        finally:
            connection.close()

    def spy(session_id: str, type: str, payload: dict) -> None:
        if watching and type in (events.MESSAGE_REMOVED, events.SESSION_UPDATED):
            seen.append((type, reader.submit(prompt_stored).result()))
        original(session_id, type, payload)

    watching = True
    monkeypatch.setattr(events.publisher, "publish", spy)
    try:
        run_turn(api, sid, "say next")
    finally:
        watching = False
        reader.shutdown()
    assert (events.MESSAGE_REMOVED, True) in seen
    assert seen and all(stored for _, stored in seen), seen

    # A prompt that cannot be written: the revert stays pending, the reverted turn stays.
    run_turn(api, sid, "say three")
    revert(api, sid, user_messages(sid)[-1].id)
    before = set(Message.objects.filter(session_id=sid).values_list("id", flat=True))

    def broken(self):  # noqa: ANN001, ANN202
        raise RuntimeError("the prompt could not be written")

    monkeypatch.setattr(loop_start, "_start_prompt", broken)
    api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"role": "user", "content": "say four"}], "wait": True},
        format="json",
    )
    session = Session.objects.get(id=sid)
    assert session.revert is not None
    assert set(Message.objects.filter(session_id=sid).values_list("id", flat=True)) == before


def test_history_moves_answer_409_while_a_run_streams(api, sid):
    run_turn(api, sid, "write a.txt one")
    first_user = user_messages(sid)[0]
    running = api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"role": "user", "content": "wait 2"}]},
        format="json",
    ).json()
    worktree = Session.objects.get(id=sid).worktree
    for url, body in [
        ("revert/", {"message_id": first_user.id}),
        ("unrevert/", {}),
        ("cleanup/", {}),
    ]:
        response = api.post(f"/api/sessions/{sid}/{url}", body, format="json")
        assert response.status_code == 409
        assert response.json()["error"]["type"] == "SessionBusyError"
    assert (worktree / "a.txt").read_text() == "one"
    assert Session.objects.get(id=sid).revert is None
    wait_until(lambda: Run.objects.get(id=running["id"]).status == "completed", 10, "the run's end")


def test_foreign_messages_and_sessions_answer_404(api, outsider_api, sid):
    run_turn(api, sid, "say hi")
    other = api.post("/api/sessions/", {}, format="json").json()["id"]
    run_turn(api, other, "say there")
    foreign = user_messages(other)[0]
    response = revert(api, sid, foreign.id)
    assert response.status_code == 404
    mine = user_messages(sid)[0]
    assert revert(outsider_api, sid, mine.id).status_code == 404
    for url in ("unrevert/", "cleanup/", "diff/"):
        method = outsider_api.get if url == "diff/" else outsider_api.post
        assert method(f"/api/sessions/{sid}/{url}").status_code == 404
    assert revert(api, sid, mine.id, "prt_nope").status_code == 404


def test_the_diff_of_a_turn_and_of_the_session(api, sid):
    run_turn(api, sid, "write a.txt 1\nwrite b.txt 2")
    run_turn(api, sid, "delete a.txt\nappend b.txt 3")
    second = user_messages(sid)[1]
    whole = api.get(f"/api/sessions/{sid}/diff/").json()
    assert [(d["file"], d["status"]) for d in whole] == [("b.txt", "added")]
    one = api.get(f"/api/sessions/{sid}/diff/?message_id={second.id}").json()
    assert [(d["file"], d["status"], d["additions"], d["deletions"]) for d in one] == [
        ("a.txt", "deleted", 0, 1),
        ("b.txt", "modified", 1, 1),
    ]


def test_an_aborted_step_still_records_its_snapshot_and_patch(api, sid, waiting):
    run = api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"role": "user", "content": "write a.txt x\nwait 30"}]},
        format="json",
    ).json()
    worktree = Session.objects.get(id=sid).worktree
    assert waiting.wait(10), "the write done, the wait begun: cancelled mid-step"
    api.post(f"/api/runs/{run['id']}/cancel/")
    wait_until(lambda: Run.objects.get(id=run["id"]).status == "cancelled", 10, "the cancel")
    step = Message.objects.get(session_id=sid, role="assistant")
    kinds = [p.type for p in Part.objects.filter(message=step).order_by("order")]
    assert kinds == ["step-start", "tool", "tool", "step-finish", "patch"]
    finish = Part.objects.get(message=step, type="step-finish")
    assert finish.data["interrupted"] is True
    assert Part.objects.get(message=step, type="patch").data["files"] == ["a.txt"]
    assert step.completed_at is None
    revert(api, sid, user_messages(sid)[0].id)
    assert not (worktree / "a.txt").exists(), "an aborted step's files can be reverted"


def test_the_diff_view_reads_beside_a_running_loop(api, sid):
    """Seen in CI: the browser's diff panel ran ``git add`` on the session's index while the
    worker did, and one of them failed on ``index.lock``. Readers now use a scratch index."""
    run_turn(api, sid, "write a.txt one")
    session = Session.objects.get(id=sid)
    (session.worktree / "a.txt").write_text("changed")
    planted(session.worktree)
    lock = session.snapshot_dir / "index.lock"
    lock.write_text("")  # the loop holds the index
    try:
        diff = api.get(f"/api/sessions/{sid}/diff/")
        assert diff.status_code == 200 and [d["file"] for d in diff.json()] == ["a.txt"]
        patch = api.get(f"/api/sessions/{sid}/diff/?file=a.txt").json()["patch"]
        assert "+changed" in patch
    finally:
        lock.unlink()
