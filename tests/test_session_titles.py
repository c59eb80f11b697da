"""Names (issue 28, item 11): a fork is "Fork of <title>", then "Fork 2 of <title>", …; an
import is "<title> (imported)", then "(imported 2)", …; so the list never shows two sessions
under one title. A fork whose source the forker may not open (a share of another user's,
the admin's fork) says in its lineage where it came from, and the list names an admin fork."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from sessions_app.models import Session
from tests.conftest import client_for, new_session, run_turn

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "/admin/sessions_app/session/"


def fork(api, sid: str, **body) -> dict:
    response = api.post(f"/api/sessions/{sid}/fork/", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_it_numbers_forks_of_one_session_so_no_two_titles_are_the_same(api):
    sid = new_session(api, title="Trip")
    run_turn(api, sid, "say hi")
    titles = [fork(api, sid)["title"] for _ in range(3)]
    assert titles == ["Fork of Trip", "Fork 2 of Trip", "Fork 3 of Trip"]
    assert fork(api, sid, title="my own name")["title"] == "my own name"
    listed = [s["title"] for s in api.get("/api/sessions/?limit=50").json()["results"]]
    assert len(listed) == len(set(listed))


def test_it_titles_an_import_as_imported_and_numbers_the_next_ones(api):
    sid = new_session(api, title="Round trip")
    run_turn(api, sid, "write a.txt one\nsay ok")
    document = api.get(f"/api/sessions/{sid}/export/?format=json").json()
    first = api.post("/api/sessions/import/", document, format="json").json()
    second = api.post("/api/sessions/import/", document, format="json").json()
    assert (first["title"], second["title"]) == ("Round trip (imported)", "Round trip (imported 2)")
    # An export of the import is not "(imported) (imported)".
    again = api.get(f"/api/sessions/{first['id']}/export/?format=json").json()
    third = api.post("/api/sessions/import/", again, format="json").json()
    assert third["title"] == "Round trip (imported 3)"


def test_a_fork_of_a_share_says_where_it_came_from(api, owner, outsider_api):
    sid = new_session(api, title="Owner's plan")
    run_turn(api, sid, "say shared")
    token = api.post(f"/api/sessions/{sid}/share/", {}, format="json").json()["token"]
    one = outsider_api.post(f"/api/shared/{token}/fork/", {}, format="json").json()
    two = outsider_api.post(f"/api/shared/{token}/fork/", {}, format="json").json()
    assert (one["title"], two["title"]) == ("Fork of Owner's plan", "Fork 2 of Owner's plan")
    assert one["lineage_kind"] == "share"
    lineage = outsider_api.get(f"/api/sessions/{one['id']}/lineage/").json()
    assert lineage["ancestors"] == []  # the owner's session is not theirs to open
    assert lineage["origin"] == {
        "kind": "share",
        "session_id": sid,
        "title": "Owner's plan",
        "owner": owner.username,
    }
    # The owner's own fork has its parent in the chain: no origin line.
    mine = fork(api, sid)
    assert api.get(f"/api/sessions/{mine['id']}/lineage/").json()["origin"] is None
    assert api.get(f"/api/sessions/{sid}/lineage/").json()["origin"] is None


def test_an_admin_fork_is_named_so_in_its_lineage_and_in_the_session_list(api, owner):
    sid = new_session(api, title="Alice's work")
    run_turn(api, sid, "say hi")
    root = User.objects.create_superuser("root", password="pw")
    admin = Client()
    admin.force_login(root)
    admin.post(CHANGELIST, {"action": "fork_action", "_selected_action": [sid]})
    copy = Session.objects.get(forked_from_session_id=sid, owner=root)
    assert copy.title == "Fork of Alice's work" and copy.lineage_kind == "admin"
    lineage = client_for(root).get(f"/api/sessions/{copy.id}/lineage/").json()
    assert lineage["origin"]["kind"] == "admin"
    assert lineage["origin"]["title"] == "Alice's work"
    page = admin.get("/").content.decode()
    assert "admin fork of" in page and "a shared session" not in page


def test_the_tools_endpoint_says_shell_is_off_where_the_deployment_disables_it(api, settings):
    settings.AGENT_ALLOW_SHELL = False
    tools = {t["name"]: t for t in api.get("/api/tools/").json()["results"]}
    assert tools["shell"]["available"] is False
    assert "disabled" in tools["shell"]["reason"]
    write = {"name": "write", "side_effects": True, "available": True, "reason": ""}
    assert tools["write"] == write
