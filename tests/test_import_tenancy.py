"""One object store holds every user's snapshots; an import must not reach into it. An import
carries every object it names: the ids it lists as ``missing_objects`` (the objects the
source's store had lost) must be named by the importer's own source session, so a made-up
export cannot ask whether another user's file exists or read it. A diff that needs an object
the store does not hold is a 404, never a 500."""

from __future__ import annotations

import base64
import hashlib

import pytest

from sessions_app.models import Message, Session
from tests.conftest import new_session, run_turn
from workspace import snapshots

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "the outsider's key"


def git_id(kind: str, body: bytes) -> str:
    return hashlib.sha1(b"%s %d\0" % (kind.encode(), len(body)) + body).hexdigest()


def export(api, sid: str) -> dict:
    answer = api.get(f"/api/sessions/{sid}/export/?format=json")
    assert answer.status_code == 200
    return answer.json()


def import_(api, document: dict):
    return api.post("/api/sessions/import/", document, format="json")


def lose(blob: bytes) -> None:
    """The store loses the loose object of ``blob`` (a disk error, a prune gone wrong)."""
    sha = git_id("blob", blob)
    (snapshots.store_path() / sha[:2] / sha[2:]).unlink()


def assert_error(answer, status: int) -> dict:
    assert answer.status_code == status, answer.content
    error = answer.json()["error"]
    assert set(error) >= {"type", "message"} and error["message"]
    return error


def test_an_import_cannot_name_another_users_file_by_its_hash(api, outsider_api):
    victim = new_session(outsider_api)
    run_turn(outsider_api, victim, f"write guess.txt {SECRET}")
    guessed = git_id("blob", SECRET.encode())
    assert (snapshots.store_path() / guessed[:2] / guessed[2:]).exists()

    mine = new_session(api)
    run_turn(api, mine, "write a.txt one")
    document = export(api, mine)
    crafted = b"100644 guess.txt\0" + bytes.fromhex(guessed)
    tree = git_id("tree", crafted)
    document["objects"].append(
        {"id": tree, "type": "tree", "data": base64.b64encode(crafted).decode()}
    )
    document["missing_objects"] = [guessed]
    finish = next(
        p for m in document["messages"] for p in m["parts"] if p["type"] in ("step-finish", "patch")
    )
    finish["data"]["snapshot"] = tree
    sessions = Session.objects.count()

    error = assert_error(import_(api, document), 400)
    assert "missing_objects" in error["message"] and guessed in error["message"]
    assert Session.objects.count() == sessions, "nothing is left behind"


def test_an_import_cannot_name_another_users_tree(api, outsider_api):
    victim = new_session(outsider_api)
    run_turn(outsider_api, victim, f"write guess.txt {SECRET}")
    their_tree = snapshots.for_session(Session.objects.get(id=victim)).peek()

    mine = new_session(api)
    run_turn(api, mine, "write a.txt one")
    document = export(api, mine)
    document["session"]["revert"] = None
    part = next(p for m in document["messages"] for p in m["parts"] if p["type"] == "step-finish")
    part["data"]["snapshot"] = their_tree
    document["missing_objects"] = [their_tree]

    assert_error(import_(api, document), 400)


def test_a_users_own_export_with_lost_objects_still_imports_for_them_only(api, outsider_api):
    sid = new_session(api)
    run_turn(api, sid, "write a.txt one")
    run_turn(api, sid, "write a.txt two")
    lose(b"one")
    document = export(api, sid)
    assert document["missing_objects"] == [git_id("blob", b"one")]

    assert import_(api, document).status_code == 201
    assert_error(import_(outsider_api, document), 400)


def test_a_diff_that_needs_an_object_the_store_lost_is_a_404(api):
    sid = new_session(api)
    run_turn(api, sid, "write a.txt one")
    run_turn(api, sid, "write a.txt two")
    first = Message.objects.filter(session_id=sid, role="user").order_by("id").first()
    lose(b"one")

    assert_error(api.get(f"/api/sessions/{sid}/diff/?message_id={first.id}&file=a.txt"), 404)
    assert_error(api.get(f"/api/sessions/{sid}/diff/?message_id={first.id}"), 404)
    whole = api.get(f"/api/sessions/{sid}/diff/?file=a.txt")  # nothing to "two": no "one"
    assert whole.status_code == 200 and "+two" in whole.json()["patch"]


def test_a_diff_of_a_tree_the_store_never_held_is_a_404(api):
    sid = new_session(api)
    run_turn(api, sid, "write a.txt one")
    first = Message.objects.filter(session_id=sid, role="user").order_by("id").first()
    session = Session.objects.get(id=sid)
    for message in Message.objects.filter(session=session):
        for part in message.parts.filter(type="step-finish"):
            part.data = {**part.data, "snapshot": "ab" * 20}
            part.save(update_fields=["data"])

    assert_error(api.get(f"/api/sessions/{sid}/diff/?message_id={first.id}"), 404)
    assert_error(api.get(f"/api/sessions/{sid}/diff/?message_id={first.id}&file=a.txt"), 404)
