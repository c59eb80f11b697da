"""Issue 45, step 3: a session import (runs_app/services/import_store.py) on a web process that
holds no worktree (this test process, ``HOLDS_WORKTREES`` False, its ``WORKSPACE_ROOT`` never
made). Two real Celery workers (hosts alpha and beta) and the central store on the https git
server, as tests/test_host_calls.py starts them (its fixtures): the import is pushed to the
store as the new session's ref, a chain holding every tree its steps name, so the web reads
its files and each step's diff from its mirror, its home host materialises the head's files
and reverts there; objects the export left out are read from the mirror; without the store,
a 503."""

from __future__ import annotations

import hashlib
import subprocess
from typing import Any

import pytest

from sessions_app.models import HistoryEvent, Part, Session
from tests.conftest import new_session
from tests.test_host_calls import HOSTS, Cluster, _turn, _users, cluster, web

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]
__all__ = ["cluster", "web"]  # the fixtures, shared with tests/test_host_calls.py


def _export(api, sid: str) -> dict[str, Any]:  # noqa: ANN001
    answer = api.get(f"/api/sessions/{sid}/export/?format=json")
    assert answer.status_code == 200, answer.content[:500]
    return answer.json()


def _import(api, document: dict[str, Any]):  # noqa: ANN001, ANN202
    return api.post("/api/sessions/import/", document, format="json")


def _three_steps(api) -> str:  # noqa: ANN001
    sid = new_session(api)
    _turn(api, sid, "write f.txt one")
    _turn(api, sid, "write f.txt two")
    _turn(api, sid, "write g.txt three")
    return sid


def _chain(cluster: Cluster, sid: str) -> list[str]:
    """The trees of the session's ref in the central store, newest first."""
    found = subprocess.run(
        [
            "git",
            "--git-dir",
            str(cluster.store.bare("central")),
            "log",
            "--format=%T",
            f"refs/sessions/{sid}/head",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return found.stdout.split()


def _body(answer) -> bytes:  # noqa: ANN001
    if getattr(answer, "streaming", False):
        return b"".join(answer.streaming_content)
    return answer.content


def _patch(api, sid: str, message_id: str, path: str) -> str:  # noqa: ANN001
    answer = api.get(f"/api/sessions/{sid}/diff/?message_id={message_id}&file={path}")
    assert answer.status_code == 200, answer.json()
    return answer.json()["patch"]


def test_an_import_is_read_from_the_mirror_and_lives_on_its_home_host(cluster, web, api):
    source = _three_steps(api)
    answer = _import(api, _export(api, source))
    assert answer.status_code == 201, answer.json()
    new = answer.json()["id"]
    session = Session.objects.get(id=new)
    assert not web.exists()  # nothing written under the web's WORKSPACE_ROOT

    # Recorded as replicated: the store's ref is a chain ending on the head's tree, holding
    # every tree the imported parts name.
    event = HistoryEvent.objects.get(session_id=new, kind="import")
    assert session.replicated_snapshot == event.data["snapshot"]
    chain = _chain(cluster, new)
    assert chain[0] == session.replicated_snapshot
    named = {
        p.data["snapshot"]
        for p in Part.objects.filter(session_id=new)
        if isinstance((p.data or {}).get("snapshot"), str)
    }
    assert named - {"4b825dc642cb6eb9a060e54bf8d69288fbee4904"} <= set(chain)
    assert len(chain) == len(set(chain)) >= 3

    # Through the API, read from the mirror: the files, and each step's diff.
    listing = api.get(f"/api/sessions/{new}/files/")
    assert listing.status_code == 200, listing.json()
    assert "g.txt" in str(listing.json()) and "f.txt" in str(listing.json())
    read = api.get(f"/api/sessions/{new}/files/f.txt")
    assert read.status_code == 200 and b"two" in _body(read)
    first, second, third = _users(new)
    assert "+one" in _patch(api, new, first, "f.txt")
    assert "-one" in _patch(api, new, second, "f.txt")
    assert "+two" in _patch(api, new, second, "f.txt")
    assert "+three" in _patch(api, new, third, "g.txt")

    # The files on its home host only; a revert there (a host call) finds every step's tree.
    home = session.host
    assert home in HOSTS
    assert cluster.files(home, new) == {"f.txt": "two", "g.txt": "three"}
    assert not (cluster.roots[next(h for h in HOSTS if h != home)] / new).exists()
    reverted = api.post(f"/api/sessions/{new}/revert/", {"message_id": second}, format="json")
    assert reverted.status_code == 200, reverted.json()
    assert cluster.files(home, new) == {"f.txt": "one"}
    assert api.post(f"/api/sessions/{new}/unrevert/").status_code == 200
    assert cluster.files(home, new) == {"f.txt": "two", "g.txt": "three"}
    assert not web.exists()


def test_objects_the_export_left_out_are_read_from_the_mirror(cluster, web, api, outsider_api):
    """A document naming, without carrying, a blob the importer's own source session holds:
    checked against the mirror, and pushed with the import from it (the first step's diff
    reads it)."""
    source = _three_steps(api)
    document = _export(api, source)
    one = hashlib.sha1(b"blob 3\0one").hexdigest()
    assert one in {o["id"] for o in document["objects"]}
    document["objects"] = [o for o in document["objects"] if o["id"] != one]
    document["missing_objects"] = [one]

    refused = _import(outsider_api, document)
    assert refused.status_code == 400 and one in refused.json()["error"]["message"]
    answer = _import(api, document)
    assert answer.status_code == 201, answer.json()
    new = answer.json()["id"]
    assert "+one" in _patch(api, new, _users(new)[0], "f.txt")
    assert not web.exists()


def test_without_the_central_store_an_import_is_a_503(cluster, web, api, settings):
    document = _export(api, _three_steps(api))
    before = Session.objects.count()
    settings.SNAPSHOT_REMOTE = ""
    answer = _import(api, document)
    assert answer.status_code == 503
    assert answer.json()["error"] == {
        "type": "ServiceUnavailable",
        "message": "An import needs the central store (SNAPSHOT_REMOTE) on a web process that "
        "holds no worktree.",
    }
    assert Session.objects.count() == before
    assert not web.exists()
