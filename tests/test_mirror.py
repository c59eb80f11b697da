"""A web process that holds no worktree (issue 45, step 3; workspace/mirror.py,
sessions_app/reads.py): with ``HOLDS_WORKTREES`` False and ``WORKSPACE_ROOT`` naming nothing,
the file listing, a file, the diffs, an archive, a patch, compare, blame, the export and a
share's files answer through the API what they answered from the local store, read from a
mirror of the central store (the tests' https git server) fetched on demand; another user
still gets a 404; trees the store does not hold are a JSON 404, a store out of reach a JSON
503; the mirror fetches once for several reads, and once for concurrent ones."""

from __future__ import annotations

import threading

import pytest

from sessions_app import reads
from sessions_app.models import Message, Session
from workspace import replication

from .conftest import client_for, new_session, run_turn
from .support.git_server import GitServer, git_server_fixture, reachable_server_fixture  # noqa: F401
from .test_downloads import _body, _unzip
from .test_replication import central  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def _reads(api, sid: str) -> dict:  # noqa: ANN001
    """Every read the web serves of the session's files, as the API answers them."""
    users = list(
        Message.objects.filter(session_id=sid, role="user").order_by("id").values_list("id")
    )
    first, second = users[0][0], users[1][0]
    base = f"/api/sessions/{sid}"
    answers = {
        "listing": api.get(f"{base}/files/"),
        "subdir": api.get(f"{base}/files/sub/"),
        "file": api.get(f"{base}/files/sub/b.txt"),
        "diff": api.get(f"{base}/diff/"),
        "turn_diff": api.get(f"{base}/diff/?message_id={second}"),
        "file_diff": api.get(f"{base}/diff/?file=a.txt"),
        "archive": api.get(f"{base}/archive/"),
        "old_archive": api.get(f"{base}/archive/?message_id={first}"),
        "patch": api.get(f"{base}/patch/"),
        "compare": api.get(f"{base}/compare/?a={first}"),
        "compare_file": api.get(f"{base}/compare/?a={first}&file=a.txt"),
        "blame": api.get(f"{base}/blame/a.txt"),
        "export": api.get(f"{base}/export/?format=json"),
        "not_kept": api.get(f"{base}/files/?not_kept=1"),
    }
    assert {k: r.status_code for k, r in answers.items()} == dict.fromkeys(answers, 200)
    seen = {k: r.json() for k, r in answers.items() if r["Content-Type"] == "application/json"}
    seen["file"] = _body(answers["file"])
    seen["archive"] = _unzip(_body(answers["archive"]))
    seen["old_archive"] = _unzip(_body(answers["old_archive"]))
    seen["patch"] = _body(answers["patch"])
    seen["export"].pop("exported_at")
    return seen


def _session_with_history(api) -> str:  # noqa: ANN001
    sid = new_session(api)
    run_turn(api, sid, "write a.txt A1")
    run_turn(api, sid, "write sub/b.txt B1\nappend a.txt  and A2")
    return sid


@pytest.fixture
def web(settings, tmp_path):  # noqa: ANN001, ANN201
    """Turns this process into a web process that holds no worktree: whatever the worker
    side wrote under the old ``WORKSPACE_ROOT`` is moved out of reach (a reader that opens
    it finds nothing), and the mirror starts empty."""

    def become() -> None:
        old = settings.WORKSPACE_ROOT
        old.rename(tmp_path / "the-worker-host-s-disk")
        settings.HOLDS_WORKTREES = False
        settings.WORKSPACE_ROOT = tmp_path / "no-such-root"
        settings.MIRROR_ROOT = tmp_path / "mirror"

    return become


@pytest.fixture
def fetches(monkeypatch) -> list[str]:  # noqa: ANN001
    """The sessions the mirror fetched, in order."""
    seen: list[str] = []
    real = replication.fetch

    def counted(snap, session_id, **kwargs):  # noqa: ANN001, ANN202
        seen.append(session_id)
        return real(snap, session_id, **kwargs)

    monkeypatch.setattr(replication, "fetch", counted)
    return seen


def test_a_web_without_worktrees_reads_what_the_local_store_gave(
    api,
    outsider,
    central,  # noqa: F811
    web,
    fetches,
    settings,
):
    sid = _session_with_history(api)
    local = _reads(api, sid)
    assert local["file"] == b"B1" and local["blame"] and local["diff"]
    web()
    assert _reads(api, sid) == local
    assert not settings.WORKSPACE_ROOT.exists()  # nothing was made (or opened) there
    assert fetches == [sid]  # one fetch served every read after it
    stranger = client_for(outsider)
    for path in ("files/", "files/a.txt", "diff/", "archive/", "blame/a.txt", "export/"):
        assert stranger.get(f"/api/sessions/{sid}/{path}").status_code == 404, path


def test_a_share_s_files_come_from_the_mirror(api, central, web):  # noqa: F811
    sid = _session_with_history(api)
    token = api.post(f"/api/sessions/{sid}/share/").json()["token"]
    page = api.get(f"/api/shared/{token}/").json()
    web()
    assert api.get(f"/api/shared/{token}/").json() == page
    assert _body(api.get(f"/api/shared/{token}/files/sub/b.txt")) == b"B1"


def test_a_fork_s_first_files_are_fetched_along_its_lineage(api, central, web, fetches):  # noqa: F811
    sid = _session_with_history(api)
    first = Message.objects.filter(session_id=sid, role="user").order_by("id")[0]
    end = Message.objects.filter(session_id=sid, parent_id=first.id).get().id
    fork = api.post(f"/api/sessions/{sid}/fork/", {"message_id": end}, format="json").json()["id"]
    listing = api.get(f"/api/sessions/{fork}/files/").json()
    web()
    assert api.get(f"/api/sessions/{fork}/files/").json() == listing
    assert _body(api.get(f"/api/sessions/{fork}/files/a.txt")) == b"A1"
    assert fetches[-1] == sid  # the source's chain holds the fork's first files


def test_two_reads_at_once_fetch_once(api, central, web, fetches):  # noqa: F811
    sid = _session_with_history(api)
    session = Session.objects.get(id=sid)
    web()
    found: list[str] = []
    start = threading.Barrier(4)

    def read() -> None:
        start.wait()
        snap = reads.snapshots_for_read(session, session.replicated_snapshot)
        found.append(snap.read_blob(session.replicated_snapshot, "sub/b.txt"))

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found == [b"B1"] * 4
    assert fetches == [sid]


def test_trees_the_store_lacks_are_a_json_404_and_an_unreachable_store_a_503(
    api,
    central,  # noqa: F811
    web,
    settings,
):
    replicated = _session_with_history(api)
    remote = settings.SNAPSHOT_REMOTE
    settings.SNAPSHOT_REMOTE = ""  # this one's steps never reach the store
    lost = _session_with_history(api)
    settings.SNAPSHOT_REMOTE = remote
    web()
    for path in ("files/", "files/a.txt", "diff/", "archive/", "blame/a.txt", "export/"):
        answer = api.get(f"/api/sessions/{lost}/{path}")
        assert answer.status_code == 404, (path, answer.content)
        assert answer.json()["error"]["type"] == "NotFound"
    settings.SNAPSHOT_REMOTE = "https://127.0.0.1:9/central.git"  # nothing listens there
    answer = api.get(f"/api/sessions/{replicated}/files/")
    assert answer.status_code == 503
    assert "snapshot store cannot be reached" in answer.json()["error"]["message"]
