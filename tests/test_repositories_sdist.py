"""A real project's source through the real path (issue 26, "Tests through the real path"):
Django's sdist from the package registry (``pip download``, cached under ``bench/results``),
committed into the test suite's HTTPS git server, cloned into a session through the API,
changed by the agent, pushed as a branch and cloned back with plain git: the branch holds
exactly the worktree's files, and the session's first snapshot is exactly the repository's
commit tree (the snapshot store was seeded from the clone, not re-hashed into something else).
"""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from bench.repo import fetch_sdist
from sessions_app.models import Message, Session

from .conftest import run_turn
from .support.git_server import GitServer, git_server_fixture  # noqa: F401
from .test_repositories import _clone, _files, _push

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(600)]


@pytest.fixture
def server(git_server: GitServer, settings) -> GitServer:
    settings.GIT_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.GIT_SSL_CAINFO = str(git_server.ca_file)
    settings.SNAPSHOT_EXCLUDE = []  # the whole project, as the repository holds it
    return git_server


def _sdist_files() -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    with tarfile.open(fetch_sdist()) as tar:
        for member in tar:
            if not member.isfile():
                continue
            name = member.name.split("/", 1)[1] if "/" in member.name else member.name
            extracted = tar.extractfile(member)
            assert extracted is not None
            files[name] = extracted.read()
    return files


def test_a_real_projects_source_round_trips_through_clone_work_and_push(api, server, tmp_path):
    files = _sdist_files()
    assert len(files) >= 5000, len(files)
    url = server.make_repo("django", files)
    session = _clone(api, url)
    assert session["source"].get("error") is None, session["source"]
    sid = session["id"]
    worktree = Session.objects.get(id=sid).worktree
    assert _files(worktree) == files

    # The first snapshot is the commit's own tree, object for object.
    commit_tree = subprocess.run(
        ["git", "--git-dir", str(server.bare("django")), "rev-parse", "main^{tree}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    first = Message.objects.filter(session_id=sid).order_by("id").first()
    assert first.parts.get(type="step-finish").data["snapshot"] == commit_tree

    run_turn(api, sid, "Touch the readme\nappend README.rst Changed by the agent.\ndelete AUTHORS")
    pushed = _push(api, sid, server, branch="agent/readme")
    assert pushed.status_code == 200, pushed.json()
    back = tmp_path / "back"
    subprocess.run(
        ["git", "clone", "-q", "--branch", "agent/readme", url, str(back)],
        env=server.git_env(tmp_path), check=True, capture_output=True,
    )  # fmt: skip
    expected = dict(files)
    del expected["AUTHORS"]
    expected["README.rst"] = files["README.rst"] + b"Changed by the agent.\n"
    assert _files(back) == expected == _files(Path(worktree))
