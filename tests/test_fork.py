"""docs/semantics.md §5.5: session fork — a copy of the path with new ids and remapped links, the
files as they were at the fork point, lineage to the direct parent and the root origin."""

from __future__ import annotations

import re
import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs_app.models import Run
from runs_app.services.fork import fork_session
from runs_app.services.runs import wait_for_run
from runs_app.services.seed import seed_runs
from sessions_app.models import Message, Part, Session
from sessions_app.selectors import active_path
from sessions_app.services.sessions import create_session
from tests.conftest import client_for, new_session, run_turn
from workspace import snapshots

pytestmark = pytest.mark.django_db(transaction=True)


def fork(api, sid, **body):
    return api.post(f"/api/sessions/{sid}/fork/", body, format="json")


def files(root) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def texts(sid) -> list[tuple[str, str]]:
    return [
        (m.role, "".join(p.text for p in m.loaded_parts if p.type == "text"))
        for m in active_path(Session.objects.get(id=sid))
    ]


def test_a_fork_copies_the_path_with_new_ids_and_links_inside_the_copy(api, owner):
    sid = new_session(api)
    run_turn(api, sid, "write a.txt one\nsay ok")
    run_turn(api, sid, "append a.txt two\nsay done")
    response = fork(api, sid, title="my fork")
    assert response.status_code == 201
    body = response.json()
    new = body["id"]
    assert body["title"] == "my fork" and body["owner"] == owner.pk
    assert body["forked_from_session_id"] == sid
    assert body["forked_from_message_id"] == Session.objects.get(id=sid).head_id
    assert texts(new) == texts(sid)
    source_ids = set(Message.objects.filter(session_id=sid).values_list("id", flat=True))
    source_ids |= set(Part.objects.filter(session_id=sid).values_list("id", flat=True))
    source_ids |= set(Run.objects.filter(session_id=sid).values_list("id", flat=True))
    copies = list(Message.objects.filter(session_id=new))
    mine = {m.id for m in copies}
    runs = {r.id: r for r in Run.objects.filter(session_id=new)}
    assert len(copies) == Message.objects.filter(session_id=sid).count()
    assert len(runs) == 2
    for m in copies:
        assert m.id not in source_ids
        assert m.parent_id is None or m.parent_id in mine
        assert m.run_id in runs
    for part in Part.objects.filter(session_id=new):
        assert part.id not in source_ids and part.message_id in mine
    for r in runs.values():
        assert r.input_message_id in mine
        assert r.forked_from_session_id == sid
        assert r.status == "completed"
    # New ids in the ids.py format, newer than the originals, and in the originals' order.
    path = [m.id for m in active_path(Session.objects.get(id=new))]
    assert path == sorted(path) and len(path) == len(copies)
    assert all(re.fullmatch(r"msg_[0-9a-f]{26}", i) for i in path)
    assert min(path) > max(Message.objects.filter(session_id=sid).values_list("id", flat=True))
    parts = list(Part.objects.filter(session_id=new).order_by("id"))
    assert [(p.message_id, p.order) for p in parts] == sorted(
        (p.message_id, p.order) for p in parts
    )
    assert Session.objects.get(id=new).head_id in mine
    # The source is unchanged.
    assert Session.objects.get(id=sid).forked_from_session_id is None
    assert all(r.forked_from_session_id is None for r in Run.objects.filter(session_id=sid))


def test_root_mid_leaf_lineage(api):
    root = new_session(api)
    run_turn(api, root, "say in root")
    mid = fork(api, root).json()["id"]
    run_turn(api, mid, "say in mid")
    leaf = fork(api, mid).json()
    assert leaf["forked_from_session_id"] == mid, "the direct parent"
    origins = {
        r.input[0]["content"]: r.forked_from_session_id
        for r in Run.objects.filter(session_id=leaf["id"])
    }
    assert origins == {"say in root": root, "say in mid": mid}, "each run's root origin"
    in_mid = {
        r.input[0]["content"]: r.forked_from_session_id for r in Run.objects.filter(session_id=mid)
    }
    assert in_mid == {"say in root": root, "say in mid": None}
    lineage = api.get(f"/api/sessions/{leaf['id']}/lineage/").json()
    assert [s["id"] for s in lineage["ancestors"]] == [root, mid]
    assert [s["id"] for s in api.get(f"/api/sessions/{root}/lineage/").json()["forks"]] == [mid]


def test_the_forked_worktree_is_the_snapshot_at_the_fork_point(api):
    sid = new_session(api)
    first = run_turn(api, sid, "write a.txt one\nwrite dir/b.bin x\nsay ok")
    at_first = files(Session.objects.get(id=sid).worktree)
    run_turn(api, sid, "write a.txt two\ndelete dir/b.bin\nwrite c.txt c\nsay ok")
    point = Message.objects.filter(run_id=first["id"]).order_by("-id").first()
    new = fork(api, sid, message_id=point.id).json()["id"]
    forked = Session.objects.get(id=new)
    assert files(forked.worktree) == at_first == {"a.txt": b"one", "dir/b.bin": b"x"}
    tree = next(
        p.data["snapshot"] for p in Part.objects.filter(message_id=point.id, type="step-finish")
    )
    assert snapshots.for_session(forked).track() == tree, "byte for byte the recorded tree"
    assert [r for r, _ in texts(new)] == ["user", "assistant", "assistant"]
    # The source moves on; the fork does not.
    run_turn(api, sid, "write a.txt three")
    assert files(forked.worktree) == at_first
    # And the fork works on its own: a turn, then a revert over copied messages.
    run_turn(api, new, "append a.txt more")
    assert (forked.worktree / "a.txt").read_text() == "onemore\n"
    user = Message.objects.filter(session_id=new, role="user").order_by("-id").first()
    assert (
        api.post(f"/api/sessions/{new}/revert/", {"message_id": user.id}, format="json").status_code
        == 200
    )
    assert (forked.worktree / "a.txt").read_text() == "one"
    first_user = Message.objects.filter(session_id=new, role="user").order_by("id").first()
    api.post(f"/api/sessions/{new}/unrevert/")
    assert (
        api.post(
            f"/api/sessions/{new}/revert/", {"message_id": first_user.id}, format="json"
        ).status_code
        == 200
    )
    assert files(forked.worktree) == {}, "before the first copied turn there were no files"


def test_a_fork_at_a_first_user_message_has_the_files_from_before(api):
    sid = new_session(api)
    run_turn(api, sid, "write a.txt one")
    second = run_turn(api, sid, "write b.txt two")
    user = Message.objects.get(id=Run.objects.get(id=second["id"]).input_message_id)
    new = fork(api, sid, message_id=user.id).json()["id"]
    assert files(Session.objects.get(id=new).worktree) == {"a.txt": b"one"}
    assert texts(new)[-1] == ("user", "write b.txt two")


def test_others_cannot_fork_my_session(api, outsider):
    sid = new_session(api)
    run_turn(api, sid, "say mine")
    other = client_for(outsider)
    assert fork(other, sid).status_code == 404
    assert other.get(f"/api/sessions/{sid}/lineage/").status_code == 404
    assert fork(api, sid, message_id="msg_nope").status_code == 404
    assert Session.objects.filter(owner=outsider).count() == 0


def test_forking_a_busy_session_copies_only_what_is_persisted(api):
    sid = new_session(api)
    run_turn(api, sid, "write a.txt one")
    slow = api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"role": "user", "content": "write b.txt b\nwait 3\nsay late"}]},
        format="json",
    ).json()
    for _ in range(300):
        # The batch is on record before it runs (tool-batch checkpoint).
        if Part.objects.filter(message__run_id=slow["id"], tool="wait").exists():
            break
        threading.Event().wait(0.02)
    assert Session.objects.get(id=sid).status == "busy"
    body = fork(api, sid).json()
    new = body["id"]
    assert body["status"] == "idle"
    copied = Run.objects.get(session_id=new, input__0__content__startswith="write b.txt")
    assert copied.status == "cancelled", "a run going on in the source is not going on here"
    assert copied.finished_at is not None
    persisted = set(Message.objects.filter(session_id=new).values_list("role", flat=True))
    assert persisted == {"user", "assistant"}
    assert not Part.objects.filter(
        session_id=new, message__role="assistant", text__contains="late"
    ).exists()
    api.post(f"/api/runs/{slow['id']}/cancel/")
    wait_for_run(Run.objects.get(id=slow["id"]), timeout=30)
    # The copy is usable: a prompt interrupts the copied unfinished tool and goes on.
    run_turn(api, new, "say carry on")
    assert texts(new)[-1] == ("assistant", "carry on")


def test_a_fork_uses_the_same_number_of_statements_for_10_and_1000_runs(owner):
    counts = []
    for size in (10, 1000):
        source = seed_runs(create_session(owner=owner, title=f"{size}"), size)
        with CaptureQueriesContext(connection) as queries:
            copy = fork_session(source=source, user=owner)
        counts.append(len(queries))
        assert Run.objects.filter(session=copy).count() == size
        assert Message.objects.filter(session=copy).count() == 3 * size
        assert Part.objects.filter(session=copy).count() == 7 * size
        assert copy.context_tokens > 0
    assert counts[0] == counts[1], counts


def test_forking_an_empty_session_and_an_unknown_body(api):
    sid = new_session(api)
    body = fork(api, sid).json()
    assert body["head_message_id"] is None and body["forked_from_session_id"] == sid
    bad = api.post(f"/api/sessions/{sid}/fork/", "[1]", content_type="application/json")
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "ValidationError"
    assert fork(api, sid, message_id=5).status_code == 404
