"""Issue 46, point 14: an upload may drop its single top-level folder (``strip_top_folder``,
docs/api.md "Repositories, uploads, pushes and credentials"): ``proj/a.txt`` becomes
``a.txt``, for an archive and for a folder, on a web that holds worktrees and on one that
records the upload through the central store (sessions_app/repositories/upload_store.py);
an upload with more than one entry at its top is refused with a sentence and nothing kept."""

from __future__ import annotations

import io
import subprocess
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from sessions_app.models import Message, Part, Session
from tests.support.git_server import git_server

pytestmark = pytest.mark.django_db(transaction=True)


def _zip(members: dict[str, str], name: str = "proj.zip") -> SimpleUploadedFile:
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        for path, text in members.items():
            archive.writestr(path, text)
    return SimpleUploadedFile(name, data.getvalue())


def _files(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): p.read_text()
        for p in root.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def test_an_archive_s_single_top_folder_is_dropped(api):
    archive = _zip({"proj/a.txt": "A", "proj/src/b.py": "B"})
    answer = api.post("/api/sessions/upload/", {"file": archive, "strip_top_folder": "true"})
    assert answer.status_code == 201, answer.json()
    session = Session.objects.get(id=answer.json()["id"])
    assert _files(session.worktree) == {"a.txt": "A", "src/b.py": "B"}
    assert answer.json()["title"] == "proj.zip"
    first = Message.objects.get(session=session)
    text = Part.objects.get(message=first, type=Part.Type.TEXT).text
    assert text.startswith("Uploaded proj.zip without its top folder proj/: 2 files")


def test_without_the_option_the_top_folder_stays(api):
    answer = api.post("/api/sessions/upload/", {"file": _zip({"proj/a.txt": "A"})})
    assert answer.status_code == 201, answer.json()
    assert _files(Session.objects.get(id=answer.json()["id"]).worktree) == {"proj/a.txt": "A"}


def test_a_folder_s_top_folder_is_dropped(api):
    answer = api.post(
        "/api/sessions/upload/",
        {
            "files": [SimpleUploadedFile("a.txt", b"A"), SimpleUploadedFile("b.txt", b"B")],
            "paths": ["proj/a.txt", "proj/sub/b.txt"],
            "strip_top_folder": "true",
            "title": "My project",
        },
    )
    assert answer.status_code == 201, answer.json()
    assert answer.json()["title"] == "My project"
    session = Session.objects.get(id=answer.json()["id"])
    assert _files(session.worktree) == {"a.txt": "A", "sub/b.txt": "B"}


@pytest.mark.parametrize(
    "members",
    [{"proj/a.txt": "A", "other/b.txt": "B"}, {"proj/a.txt": "A", "README": "r"}, {"a.txt": "A"}],
)
def test_more_than_one_entry_at_the_top_is_refused_and_nothing_kept(api, members, settings):
    archive = _zip(members)
    answer = api.post("/api/sessions/upload/", {"file": archive, "strip_top_folder": "true"})
    assert answer.status_code == 400
    message = answer.json()["error"]["message"]
    assert "single folder at its top" in message, message
    assert not Session.objects.exists()
    root = Path(settings.WORKSPACE_ROOT)
    assert [p for p in root.iterdir() if p.name.startswith("ses_")] == []


def test_a_value_other_than_true_or_false_is_refused(api):
    archive = _zip({"proj/a.txt": "A"})
    answer = api.post("/api/sessions/upload/", {"file": archive, "strip_top_folder": "maybe"})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "strip_top_folder must be true or false."
    assert not Session.objects.exists()


def test_through_the_central_store_the_top_folder_is_dropped_too(api, settings, tmp_path):
    # A web that holds no worktree (issue 45): the upload goes to the central store as the
    # session's ref, its files already without the top folder. No host is live here, so the
    # worktree is materialised later; the store holds what it will be made of.
    with git_server(tmp_path) as store:
        store.make_repo("central", {"README": "the central store\n"})
        settings.HOLDS_WORKTREES = False
        settings.WORKSPACE_ROOT = tmp_path / "web-root"
        settings.SNAPSHOT_REMOTE = store.url("central")
        settings.SNAPSHOT_REMOTE_TOKEN = store.token
        settings.GIT_SSL_CAINFO = str(store.ca_file)
        settings.HOST_CALL_TIMEOUT = 1
        archive = _zip({"proj/a.txt": "A", "proj/src/b.py": "B"})
        answer = api.post("/api/sessions/upload/", {"file": archive, "strip_top_folder": "true"})
        assert answer.status_code == 201, answer.json()
        sid = answer.json()["id"]
        refs = subprocess.run(
            ["git", "--git-dir", str(store.bare("central")), "for-each-ref", "--format=%(refname)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        mine = [r for r in refs if sid in r]
        assert mine, refs
        tree = store.read_tree("central", mine[0])
        assert {k: v.decode() for k, v in tree.items()} == {"a.txt": "A", "src/b.py": "B"}
        assert not Path(settings.WORKSPACE_ROOT, sid).exists()
