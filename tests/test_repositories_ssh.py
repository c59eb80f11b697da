"""Sessions cloned from and pushed to a real git server over ssh (``tests/support/ssh_server.py``:
OpenSSH's sshd, ``git-shell`` behind a restricted key) with a saved ``ssh_key`` credential: the
key goes to a 0600 file outside every worktree for as long as git runs and nowhere else, and
the ssh client offers that key and no other."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from sessions_app.models import Credential, HistoryEvent, Session
from workspace import repos

from .conftest import run_turn
from .support.ssh_server import SshGitServer, available, ssh_git_server_fixture  # noqa: F401
from .test_repositories import _bytes, _clone, _files

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not available() and not os.environ.get("REQUIRE_BROWSER"),
        reason="openssh-server is not installed (.ci/run installs it)",
    ),
]

FILES = {"README.md": "# demo\n", "src/app.py": "print('hi')\n", "src/lib/util.py": "X = 1\n"}


@pytest.fixture
def server(ssh_git_server: SshGitServer, settings) -> SshGitServer:
    settings.GIT_ALLOWED_HOSTS = ["127.0.0.1"]
    return ssh_git_server


@pytest.fixture
def key_files(monkeypatch, tmp_path) -> tuple[Path, list[tuple[Path, int, str]]]:
    """The runner's temporary directories go to a directory of this test's own (so other
    processes' ``agentplat-git-*`` do not count); every key file it writes is recorded as
    (path, mode, text) while git runs."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    seen: list[tuple[Path, int, str]] = []
    original = repos._environment

    def spy(home, remote, secret, key_dir, host_key=""):  # noqa: ANN001, ANN202
        env = original(home, remote, secret, key_dir, host_key)
        key = Path(key_dir) / "key"
        if key.exists():
            seen.append((key, stat.S_IMODE(key.stat().st_mode), key.read_text()))
        return env

    monkeypatch.setattr(repos, "_environment", spy)
    return scratch, seen


def _credential(api, server: SshGitServer, secret: str | None = None, **fields) -> dict:  # noqa: ANN001, ANN003
    answer = api.post(
        "/api/credentials/",
        {"name": f"deploy-{len(Credential.objects.all())}", "host": "127.0.0.1",
         "port": server.port, "kind": "ssh_key",
         "secret": server.private_key if secret is None else secret, **fields},
        format="json",
    )  # fmt: skip
    assert answer.status_code == 201, answer.json()
    assert "secret" not in answer.json()
    return answer.json()


def _key_lines(server: SshGitServer) -> list[str]:
    """The key's base64 body lines: none may appear anywhere, whole or in part."""
    return [line for line in server.private_key.splitlines() if line and "-----" not in line]


def test_a_private_ssh_repository_clones_with_a_saved_key_that_never_leaks(api, server, key_files):
    scratch, seen = key_files
    url = server.make_repo("private", FILES, extra_commits=1)
    credential = _credential(api, server)
    session = _clone(api, url, credential_id=credential["id"])
    assert session["source"].get("error") is None, session["source"]
    assert session["source"]["commit"] == server.head("private", "main")
    assert session["source"]["url"] == url
    worktree = Session.objects.get(id=session["id"]).worktree
    assert _files(worktree) == _bytes(FILES)

    # The key went to a 0600 file outside every worktree, as written (one trailing newline),
    # for as long as git ran, and is gone with its directory.
    assert seen, "no key file was written"
    for key, mode, text in seen:
        assert mode == 0o600, oct(mode)
        assert text == server.private_key.strip() + "\n"
        assert key.parent.parent == scratch and key.parent.name.startswith("agentplat-git-")
        assert not key.exists() and not key.parent.exists()
    assert not list(scratch.glob("agentplat-git-*"))

    # Nowhere in the worktree (its .git included), the answers or the history's rows.
    secrets = [server.private_key.strip(), *_key_lines(server)]
    for path in worktree.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in secrets:
                assert secret.encode() not in data, path
    shown = str(session) + str(api.get("/api/credentials/").json())
    shown += str(list(HistoryEvent.objects.values_list("data", flat=True)))
    for secret in secrets:
        assert secret not in shown
    # The worktree's origin is the URL as given, with no key or option in it.
    assert f"url = {url}\n" in (worktree / ".git" / "config").read_text()


def test_without_the_key_the_clone_fails_and_leaves_nothing(api, server, key_files):
    scratch, seen = key_files
    url = server.make_repo("locked", FILES)
    session = _clone(api, url)
    error = session["source"].get("error")
    assert error and error.startswith("The clone failed"), session["source"]
    assert session["source"]["commit"] is None
    assert _files(Session.objects.get(id=session["id"]).worktree) == {}
    assert not list(Session.objects.get(id=session["id"]).worktree.iterdir())
    assert seen == []
    assert not list(scratch.glob("agentplat-git-*"))


def test_a_key_pasted_with_windows_line_endings_still_clones(api, server):
    """A private key pasted from a Windows editor has CRLF line ends; OpenSSH cannot load
    such a file ("error in libcrypto"), so the runner must write it with LF ends."""
    url = server.make_repo("crlf", FILES)
    pasted = server.private_key.replace("\n", "\r\n")
    credential = _credential(api, server, secret=pasted)
    session = _clone(api, url, credential_id=credential["id"])
    assert session["source"].get("error") is None, session["source"]
    assert _files(Session.objects.get(id=session["id"]).worktree) == _bytes(FILES)


def test_work_is_pushed_over_ssh_with_the_key(api, server, key_files, tmp_path):
    scratch, _seen = key_files
    url = server.make_repo("pushme", FILES)
    credential = _credential(api, server)
    session = _clone(api, url, credential_id=credential["id"])
    assert session["source"].get("error") is None, session["source"]
    sid = session["id"]
    run_turn(api, sid, "write new.txt hi")
    answer = api.post(
        f"/api/sessions/{sid}/push/",
        {"branch": "agent/x", "credential_id": credential["id"]},
        format="json",
    )
    assert answer.status_code == 200, answer.json()
    pushed = answer.json()
    assert pushed["remote"] == url and pushed["branch"] == "agent/x"
    assert server.head("pushme", "agent/x") == pushed["commit"]
    tree = server.read_tree("pushme", "agent/x")
    assert "new.txt" in tree
    assert tree == _files(Session.objects.get(id=sid).worktree)
    assert server.head("pushme", "main") == session["source"]["commit"]
    assert HistoryEvent.objects.filter(session_id=sid, kind="push").exists()
    assert not list(scratch.glob("agentplat-git-*"))
    # The pushed branch, cloned back with plain ssh git, holds the same files.
    back = tmp_path / "back"
    subprocess.run(
        ["git", "clone", "-q", "--branch", "agent/x", url, str(back)],
        env=server.git_env(tmp_path / "home"), check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    assert _files(back) == tree


def test_a_credential_of_the_wrong_kind_is_refused(api, server):
    url = server.make_repo("kinds", FILES)
    token = api.post(
        "/api/credentials/",
        {"name": "tok", "host": "127.0.0.1", "kind": "token", "secret": "t0ken-t0ken"},
        format="json",
    ).json()
    answer = api.post(
        "/api/sessions/", {"repository": {"url": url, "credential_id": token["id"]}}, format="json"
    )
    assert answer.status_code == 400, answer.json()
    assert "https" in answer.json()["error"]["message"]

    key = _credential(api, server)
    answer = api.post(
        "/api/sessions/",
        {"repository": {"url": "https://127.0.0.1/kinds.git", "credential_id": key["id"]}},
        format="json",
    )
    assert answer.status_code == 400, answer.json()
    assert "ssh" in answer.json()["error"]["message"]
    assert not Session.objects.exists()

    # A push with a token to an ssh origin is refused the same way, before git runs.
    session = _clone(api, url, credential_id=key["id"])
    assert session["source"].get("error") is None, session["source"]
    refused = api.post(
        f"/api/sessions/{session['id']}/push/",
        {"branch": "agent/tok", "credential_id": token["id"]},
        format="json",
    )
    assert refused.status_code == 400, refused.json()
    assert server.head("kinds", "agent/tok") is None


def test_ssh_offers_only_the_chosen_key_never_the_server_accounts_own(server, tmp_path):
    """OpenSSH looks for its default keys (~/.ssh/id_*) in the passwd entry's home, not in
    $HOME, and ``IdentitiesOnly`` does not stop that: unless ``IdentityFile=none`` is given,
    a clone without a credential (or with one) offers the server account's own keys to any
    host a user names."""
    remote = repos.check_url(server.url("any"))
    home, key_dir = tmp_path / "home", tmp_path / "scratch"
    home.mkdir()
    for secret in (None, repos.Secret("ssh_key", server.private_key)):
        key_dir.mkdir()
        env = repos._environment(str(home), remote, secret, str(key_dir))
        argv = shlex.split(env["GIT_SSH_COMMAND"])
        resolved = subprocess.run(
            [*argv, "-G", "-p", str(server.port), f"{server.user}@127.0.0.1"],
            env=env, capture_output=True, text=True, check=True, timeout=30,
        ).stdout  # fmt: skip
        offered = {
            line.split(" ", 1)[1]
            for line in resolved.splitlines()
            if line.startswith("identityfile ")
        }
        expected = {str(key_dir / "key")} if secret else set()
        assert offered - {"none"} == expected, (secret and secret.kind, offered)
        (key_dir / "key").unlink(missing_ok=True)
        key_dir.rmdir()


def test_a_push_meets_the_host_key_the_clone_met_or_goes_nowhere(api, server):
    """Trust on first use, once per session: the clone's host key is pinned, so a push to a
    host that answers with another key (a man in the middle) is refused before anything
    is sent."""
    url = server.make_repo("pinned", FILES)
    credential = _credential(api, server)
    session = _clone(api, url, credential_id=credential["id"])
    source = Session.objects.get(id=session["id"]).source
    assert "ssh-" in source["host_key"] or "ecdsa-" in source["host_key"]
    assert "host_key" not in session["source"]  # not the API's business
    run_turn(api, session["id"], "write new.txt hi")
    # Another host's key under the same name: what a man in the middle would present.
    other = Path(tempfile.mkdtemp()) / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    fake = "127.0.0.1 " + " ".join(other.with_suffix(".pub").read_text().split()[:2]) + "\n"
    Session.objects.filter(id=session["id"]).update(source={**source, "host_key": fake})
    answer = api.post(
        f"/api/sessions/{session['id']}/push/",
        {"branch": "agent/x", "credential_id": credential["id"]},
        format="json",
    )
    assert answer.status_code == 400, answer.json()
    assert "Host key verification failed" in answer.json()["error"]["message"]
    assert server.head("pinned", "agent/x") is None
