"""Security round 4, finding 6 (issue 42): another user's fork of a shared session carries none
of the owner's origin — no URL, ref, branch, commit, ssh host key or credential, so it cannot be
pushed there — and the share link does not show the origin either; the owner's own forks keep it."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from sessions_app.models import Message, Part, Session

from .conftest import run_turn
from .support.git_server import (  # noqa: F401
    GitServer,
    git_server_fixture,
    reachable_server_fixture,
)
from .test_credential_scope import _token
from .test_repositories import FILES, _bytes, _clone, _files, _port

pytestmark = pytest.mark.django_db(transaction=True)


def _shared_clone(api, server: GitServer, name: str) -> tuple[str, dict, str]:  # noqa: ANN001
    """A private repository cloned with the owner's token, a turn on it, and a share link."""
    url = server.make_repo(name, FILES, private=True)
    session = _clone(api, url, credential_id=_token(api, server, port=_port(server))["id"])
    assert session["source"]["commit"], session["source"]
    run_turn(api, session["id"], "write mine.txt one")
    token = api.post(f"/api/sessions/{session['id']}/share/").json()["token"]
    return url, session, token


def test_it_gives_another_users_share_fork_no_origin_and_refuses_its_push(
    api, outsider_api, server
):
    url, session, token = _shared_clone(api, server, "private-origin")
    fork = outsider_api.post(f"/api/shared/{token}/fork/", {}, format="json")
    assert fork.status_code == 201, fork.json()
    fork = fork.json()
    assert fork["source"] == {"type": "share"}
    assert Session.objects.get(id=fork["id"]).source == {"type": "share"}
    # Its files came along; where they came from did not, in no answer and no row of it.
    assert _files(Session.objects.get(id=fork["id"]).worktree) == {
        **_bytes(FILES),
        "mine.txt": b"one",
    }
    seen = str(outsider_api.get(f"/api/sessions/{fork['id']}/").json()) + str(
        outsider_api.get(f"/api/sessions/{fork['id']}/messages/").json()
    )
    assert server.base_url not in seen
    texts = list(Part.objects.filter(session_id=fork["id"]).values_list("text", flat=True))
    assert not any(server.base_url in t for t in texts)
    assert "Cloned a repository (its address stays with the owner): 3 files" in "".join(texts)
    # The outsider's own token for that very host and port pushes nothing there.
    theirs = _token(outsider_api, server, port=_port(server))
    pushed = outsider_api.post(
        f"/api/sessions/{fork['id']}/push/",
        {"branch": "agent/stolen", "credential_id": theirs["id"]},
        format="json",
    )
    assert pushed.status_code == 400, pushed.json()
    assert pushed.json()["error"]["type"] == "ValidationError"
    assert "cannot be pushed" in pushed.json()["error"]["message"]
    assert server.head("private-origin", "agent/stolen") is None


def test_it_keeps_the_origin_in_the_owners_own_forks(api, server):
    url, session, token = _shared_clone(api, server, "own-origin")
    row = Session.objects.get(id=session["id"])
    assert row.source["url"] == url and row.source.get("credential_id")
    fork = api.post(f"/api/sessions/{session['id']}/fork/", {}, format="json").json()
    assert Session.objects.get(id=fork["id"]).source == row.source
    of_my_share = api.post(f"/api/shared/{token}/fork/", {}, format="json").json()
    assert Session.objects.get(id=of_my_share["id"]).source == row.source
    assert any(
        url in t for t in Part.objects.filter(session_id=fork["id"]).values_list("text", flat=True)
    )


def test_it_shows_no_origin_on_the_shared_page_or_in_the_shared_api(
    api, outsider, outsider_api, server
):
    url, session, token = _shared_clone(api, server, "shown-origin")
    own = api.get(f"/api/sessions/{session['id']}/messages/").json()
    cloned = next(
        p["text"]
        for m in own["results"]
        for p in m["parts"]
        if p["type"] == "text" and p.get("source")
    )
    assert cloned.startswith(f"Cloned {url} at "), "the owner sees it"
    shared = outsider_api.get(f"/api/shared/{token}/")
    assert shared.status_code == 200
    assert server.base_url not in shared.content.decode()
    first = shared.json()["messages"][0]["parts"][0]["text"]
    counts = cloned.rsplit(": ", 1)[1]
    assert first == f"Cloned a repository (its address stays with the owner): {counts}"
    browser = Client()
    browser.force_login(outsider)
    page = browser.get(f"/s/{token}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert server.base_url not in html and "its address stays with the owner" in html


def test_share_forks_made_before_lose_their_origin_and_the_owners_keep_it(owner, outsider):
    origin = {"type": "git", "url": "https://git.example.com/p.git", "commit": "c" * 40}
    text = "Cloned https://git.example.com/p.git (main) at cccccccccccc: 3 files, 25 bytes."
    source = Session.objects.create(owner=owner, title="p", source=origin)
    theirs = Session.objects.create(
        owner=outsider, title="Fork of p", lineage_kind="share", forked_from_session=source,
        source=origin,
    )  # fmt: skip
    mine = Session.objects.create(
        owner=owner, title="Fork 2 of p", lineage_kind="share", forked_from_session=source,
        source=origin,
    )  # fmt: skip
    for session in (theirs, mine):
        message = Message.objects.create(session=session, role="user")
        Part.objects.create(
            message=message, session=session, type="text", text=text, data={"source": "git"}
        )
    executor = MigrationExecutor(connection)
    executor.migrate([("sessions_app", "0014_credential_port")])
    call_command("migrate", verbosity=0)
    assert Session.objects.get(id=theirs.id).source == {"type": "share"}
    assert Part.objects.get(session_id=theirs.id).text == (
        "Cloned a repository (its address stays with the owner): 3 files, 25 bytes."
    )
    assert Session.objects.get(id=mine.id).source == origin
    assert Part.objects.get(session_id=mine.id).text == text
