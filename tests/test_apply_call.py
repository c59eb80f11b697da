"""What a tool call's Apply applies (issue 46, point 2; docs/semantics.md §14.2): a file
tool's call takes its step's change restricted to the file it names, so a conflict in a file
another call of the step wrote does not stop it; a shell call takes its whole step and says
so (``scope``); ``scope: "step"`` takes a file call's whole step as before."""

from __future__ import annotations

import pytest

from sessions_app.models import Message, Part

from .conftest import new_session, run_turn
from .support.shell import shell_on
from .test_apply import cont, files, tool_part

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def two_calls(api) -> tuple[str, dict]:  # noqa: ANN001
    """A session whose head has a.txt "from-y", and another branch whose one step wrote
    a.txt (conflicting with the head's) and b.txt (new) by two calls."""
    sid = new_session(api)
    base = run_turn(api, sid, "write a.txt base")
    x = run_turn(api, sid, "Branch X\nwrite a.txt x-version\nwrite b.txt from-x")
    cont(api, base["id"], input="Branch Y\nwrite a.txt from-y")
    # One step: both calls between the same step-start and step-finish.
    a, b = tool_part(x["id"], "a.txt"), tool_part(x["id"], "b.txt")
    assert a.message_id == b.message_id
    assert files(sid) == {"a.txt": "from-y"}
    return sid, x


def apply(api, sid: str, **body):  # noqa: ANN001, ANN003, ANN201
    return api.post(f"/api/sessions/{sid}/apply/", body, format="json")


def test_a_calls_apply_takes_only_its_own_file_past_a_conflict_in_another(
    api, outsider_api, two_calls
):
    sid, x = two_calls
    b = tool_part(x["id"], "b.txt")
    # Nobody else applies it, onto a session of theirs or onto this one.
    theirs = new_session(outsider_api)
    assert apply(outsider_api, theirs, part_id=b.id).status_code == 404
    assert apply(outsider_api, sid, part_id=b.id).status_code == 404
    answer = apply(api, sid, part_id=b.id)
    assert answer.status_code == 200, answer.json()
    result = answer.json()
    assert result["applied"] == ["b.txt"] and result["conflicts"] == []
    assert result["scope"] == "call" and result["paths"] == ["b.txt"]
    assert files(sid) == {"a.txt": "from-y", "b.txt": "from-x"}
    event = Message.objects.get(id=result["message_id"])
    assert event.parts.get(type="applied").data["scope"] == "call"
    assert "write b.txt call" in event.parts.get(type="text").text


def test_the_conflicting_calls_apply_names_its_file_and_takes_only_it(api, two_calls):
    sid, x = two_calls
    a = tool_part(x["id"], "a.txt")
    refused = apply(api, sid, part_id=a.id)
    assert refused.status_code == 409
    message = refused.json()["error"]["message"]
    assert "write a.txt call" in message and "conflicts in a.txt" in message
    assert files(sid) == {"a.txt": "from-y"}
    marked = apply(api, sid, part_id=a.id, on_conflict="markers")
    assert marked.status_code == 200, marked.json()
    # b.txt, the other call's, is not taken.
    assert marked.json()["applied"] == ["a.txt"] and marked.json()["conflicts"] == ["a.txt"]
    assert sorted(files(sid)) == ["a.txt"] and "<<<<<<<" in files(sid)["a.txt"]


def test_the_whole_step_is_still_applied_as_one(api, two_calls):
    sid, x = two_calls
    b = tool_part(x["id"], "b.txt")
    refused = apply(api, sid, part_id=b.id, scope="step")
    assert refused.status_code == 409
    assert "write step conflicts in a.txt" in refused.json()["error"]["message"]
    # The turn (one step here), by its message, as before.
    x_user = Message.objects.filter(run_id=x["id"], role="user").first()
    assert apply(api, sid, message_id=x_user.id).status_code == 409
    marked = apply(api, sid, part_id=b.id, scope="step", on_conflict="markers")
    assert marked.status_code == 200, marked.json()
    assert marked.json()["scope"] == "step" and marked.json()["paths"] == []
    assert sorted(marked.json()["applied"]) == ["a.txt", "b.txt"]
    assert files(sid)["b.txt"] == "from-x" and "<<<<<<<" in files(sid)["a.txt"]
    assert apply(api, sid, part_id=b.id, scope="all").status_code == 400


def test_a_shell_call_applies_its_whole_step_and_says_so(api, settings):  # noqa: ANN001
    shell_on(settings)
    sid = new_session(api)
    base = run_turn(api, sid, "write base.txt base")
    x = run_turn(api, sid, "Branch X\nshell printf s > s.txt\nwrite w.txt from-write")
    cont(api, base["id"], input="Branch Y\nwrite y.txt y")
    shell = Part.objects.get(message__run_id=x["id"], type="tool", tool="shell")
    answer = apply(api, sid, part_id=shell.id)
    assert answer.status_code == 200, answer.json()
    result = answer.json()
    # The shell's writes are not told apart from the step's: the step, named so.
    assert result["scope"] == "step" and result["paths"] == []
    assert sorted(result["applied"]) == ["s.txt", "w.txt"]
    assert files(sid) == {"base.txt": "base", "s.txt": "s", "w.txt": "from-write", "y.txt": "y"}
    event = Message.objects.get(id=result["message_id"])
    assert "the shell step" in event.parts.get(type="text").text


def test_a_stale_or_changeless_part_is_a_clear_error(api, two_calls):
    sid, x = two_calls
    gone = apply(api, sid, part_id="prt_00000000000000000000000000")
    assert gone.status_code == 404 and "No such part" in gone.json()["error"]["message"]
    y = run_turn(api, sid, "read a.txt")
    read = Part.objects.get(message__run_id=y["id"], type="tool", tool="read")
    refused = apply(api, sid, part_id=read.id)
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        "A read call changes no file: it has nothing to apply."
    )
    text = Part.objects.filter(message__run_id=x["id"], type="text").first()
    assert apply(api, sid, part_id=text.id).status_code == 400
    assert files(sid) == {"a.txt": "from-y"}
