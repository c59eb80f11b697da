"""Real code in, real work out (issue 26, docs/semantics.md §13): sessions cloned from a real git
server (``tests/support/git_server.py``: Debian's ``git http-backend`` over HTTPS, a token
for private repositories and every push), their work pushed back and cloned again, and the
hostile cases: URLs that lead inside the deployment, credentials that must never leak, a
repository's own config and hooks that must never run, limits that must leave nothing."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from sessions_app import vault
from sessions_app.models import Credential, HistoryEvent, Message, Session
from sessions_app.repositories import fill

from .conftest import client_for, run_turn, wait_until
from .support.git_server import (  # noqa: F401
    GitServer,
    git_server_fixture,
    reachable_server_fixture,
)

pytestmark = pytest.mark.django_db(transaction=True)

FILES = {"README.md": "# demo\n", "src/app.py": "print('hi')\n", "src/lib/util.py": "X = 1\n"}


def _port(server: GitServer) -> int:
    return int(server.base_url.rsplit(":", 1)[1])


def _clone(api, url: str, **repository) -> dict:  # noqa: ANN001
    answer = api.post("/api/sessions/", {"repository": {"url": url, **repository}}, format="json")
    assert answer.status_code == 201, answer.json()
    session = answer.json()
    assert session["status"] == "preparing"
    assert session["source"]["type"] == "git" and session["source"]["commit"] is None
    wait_until(lambda: Session.objects.get(id=session["id"]).status == "idle", timeout=60)
    return api.get(f"/api/sessions/{session['id']}/").json()


def _files(root: Path) -> dict[str, bytes]:
    out = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if rel == ".git" or rel.startswith(".git/") or not path.is_file():
            continue
        out[rel] = path.read_bytes()
    return out


def _bytes(files: dict[str, str]) -> dict[str, bytes]:
    return {k: v.encode() for k, v in files.items()}


def test_a_session_from_a_public_repository_holds_its_files_and_its_git(api, server):
    url = server.make_repo("demo", FILES, extra_commits=2)
    session = _clone(api, url)
    assert session["source"]["commit"] == server.head("demo", "main")
    assert session["source"]["branch"] == "main"
    assert session["source"].get("error") is None
    worktree = Session.objects.get(id=session["id"]).worktree
    assert _files(worktree) == _bytes(FILES)
    # The repository's own .git is the user's, shallow (depth 1 by default), origin as given.
    log = subprocess.run(
        ["git", "-C", str(worktree), "rev-list", "--count", "HEAD"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert log.stdout.strip() == "1"
    origin = (worktree / ".git" / "config").read_text()
    assert url in origin
    # The clone is the first history event: a message naming it, its files a patch.
    first = Message.objects.filter(session_id=session["id"]).order_by("id").first()
    assert "Cloned" in first.parts.get(type="text").text
    assert sorted(first.parts.get(type="patch").data["files"]) == sorted(FILES)
    assert HistoryEvent.objects.filter(session_id=session["id"], kind="clone").exists()
    # The Changes panel counts from the clone, not from the empty worktree.
    assert session["summary"]["files"] == 0
    # No staging directory is left.
    staging = Path(worktree).parent / fill.STAGING
    assert not any(staging.iterdir()) if staging.exists() else True


def test_a_branch_a_tag_or_a_commit_and_a_depth(api, server):
    url = server.make_repo("refs", FILES, extra_commits=3)
    bare = server.bare("refs")
    first = subprocess.run(
        ["git", "--git-dir", str(bare), "rev-list", "--max-parents=0", "main"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    session = _clone(api, url, ref=first, depth=0)
    assert session["source"]["commit"] == first
    worktree = Session.objects.get(id=session["id"]).worktree
    assert ".history" in _files(worktree)
    full = _clone(api, url, ref="main", depth=0)
    count = subprocess.run(
        ["git", "-C", str(Session.objects.get(id=full["id"]).worktree), "rev-list", "--count",
         "HEAD"], capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert count == "4"


def test_a_private_repository_needs_the_users_saved_token_which_never_leaks(api, server):
    url = server.make_repo("secret", FILES, private=True)
    without = _clone(api, url)
    assert "failed" in without["source"]["error"]
    assert _files(Session.objects.get(id=without["id"]).worktree) == {}

    saved = api.post(
        "/api/credentials/",
        {
            "name": "ci",
            "host": "127.0.0.1",
            "port": _port(server),
            "kind": "token",
            "secret": server.token,
        },
        format="json",
    )
    assert saved.status_code == 201
    assert "secret" not in saved.json()
    assert server.token not in str(api.get("/api/credentials/").json())
    row = Credential.objects.get(id=saved.json()["id"])
    assert server.token.encode() not in bytes(row.secret)
    assert vault.unseal(row.secret) == server.token

    session = _clone(api, url, credential_id=row.id)
    assert session["source"]["commit"] == server.head("secret", "main")
    worktree = Session.objects.get(id=session["id"]).worktree
    assert _files(worktree) == _bytes(FILES)
    # Nowhere in the worktree (its .git included), the session's answer or its events' rows.
    for path in worktree.rglob("*"):
        if path.is_file():
            assert server.token.encode() not in path.read_bytes(), path
    assert server.token not in str(session)
    assert server.token not in str(list(HistoryEvent.objects.values_list("data", flat=True)))


def test_a_credential_goes_only_to_its_own_host_and_only_for_its_owner(api, server, outsider):
    url = server.make_repo("own", FILES, private=True)
    other_host = api.post(
        "/api/credentials/",
        {"name": "gh", "host": "github.com", "kind": "token", "secret": "t0k"},
        format="json",
    ).json()
    answer = api.post(
        "/api/sessions/",
        {"repository": {"url": url, "credential_id": other_host["id"]}},
        format="json",
    )
    assert answer.status_code == 400
    assert "github.com" in answer.json()["error"]["message"]
    mine = api.post(
        "/api/credentials/",
        {
            "name": "local",
            "host": "127.0.0.1",
            "port": _port(server),
            "kind": "token",
            "secret": server.token,
        },
        format="json",
    ).json()
    theirs = client_for(outsider).post(
        "/api/sessions/", {"repository": {"url": url, "credential_id": mine["id"]}},
        format="json",
    )  # fmt: skip
    assert theirs.status_code == 404
    assert client_for(outsider).delete(f"/api/credentials/{mine['id']}/").status_code == 404
    assert api.delete(f"/api/credentials/{mine['id']}/").status_code == 204


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc",
        "/srv/repos/x.git",
        "ext::sh -c touch% /tmp/pwned",
        "http://example.com/x.git",
        "https://127.0.0.1/x.git",  # loopback, not allowed here
        "https://localhost/x.git",
        "https://10.1.2.3/x.git",
        "https://169.254.169.254/latest.git",
        "https://[::1]/x.git",
        "git://192.168.1.1/x.git",
        "https://user:pw@example.com/x.git",
        "https://example.com/-upload-pack=x",
        "ssh://-oProxyCommand=touch/x.git",
        "",
    ],
)
def test_urls_that_lead_inside_the_deployment_or_run_something_are_refused(api, url):
    answer = api.post("/api/sessions/", {"repository": {"url": url}}, format="json")
    assert answer.status_code == 400, (url, answer.json())
    assert answer.json()["error"]["message"]
    assert not Session.objects.exists()


def test_a_host_named_in_git_allowed_hosts_may_be_private(settings):
    settings.GIT_ALLOWED_HOSTS = ["10.1.2.3"]
    from workspace import repos

    assert repos.check_url("https://10.1.2.3/x.git").addresses == ("10.1.2.3",)
    settings.GIT_ALLOWED_HOSTS = []
    with pytest.raises(repos.RepoError):
        repos.check_url("https://10.1.2.3/x.git")


def test_https_is_pinned_to_the_addresses_checked():
    from workspace import repos

    remote = repos.Remote("https://h.example/x.git", "https", "h.example", 443, ("93.184.216.34",))
    assert remote.config() == [("http.curloptResolve", "h.example:443:93.184.216.34")]
    ssh = repos.Remote("ssh://git@h.example/x.git", "ssh", "h.example", 22, ("93.184.216.34",))
    assert ssh.pinned_url == "ssh://git@93.184.216.34:22/x.git"


def test_the_servers_own_git_config_never_reaches_a_clone(api, server, tmp_path, monkeypatch):
    """A naive ``git clone`` reads the server user's config: a smudge filter there (or one a
    repository's .gitattributes names) would run on the server."""
    marker = tmp_path / "pwned"
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        f'[filter "evil"]\n\tsmudge = touch {marker}\n\trequired = true\n'
        f"[core]\n\thooksPath = {tmp_path}/hooks\n"
    )
    monkeypatch.setenv("HOME", str(home))
    url = server.make_repo("attrs", {**FILES, ".gitattributes": "* filter=evil\n"})
    session = _clone(api, url)
    assert session["source"].get("error") is None
    assert not marker.exists()


def test_what_the_agent_leaves_in_the_repositorys_git_never_runs_on_the_server(
    api, server, tmp_path
):
    """The agent owns the worktree's .git: a core.fsmonitor, a hook, a new origin there must
    not run or be followed by a snapshot or a push."""
    url = server.make_repo("hostile", FILES)
    session = _clone(api, url)
    worktree = Session.objects.get(id=session["id"]).worktree
    marker = tmp_path / "ran"
    git_dir = worktree / ".git"
    with (git_dir / "config").open("a") as config:
        config.write(
            f"[core]\n\tfsmonitor = touch {marker}\n\thooksPath = hooks\n"
            '[remote "origin"]\n\turl = https://attacker.example/x.git\n'
        )
    hooks = git_dir / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook in ("pre-push", "post-checkout", "pre-commit", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (hooks / hook).chmod(0o755)
    run_turn(api, session["id"], "write src/new.py NEW = 2")
    pushed = _push(api, session["id"], server)
    assert pushed.status_code == 200, pushed.json()
    assert pushed.json()["remote"] == url  # the session's origin, not the worktree's
    assert not marker.exists()


def _push(api, session_id: str, server: GitServer, branch: str = "agent/work"):  # noqa: ANN001
    credential = api.post(
        "/api/credentials/",
        {"name": f"push-{time.time()}", "host": "127.0.0.1", "port": _port(server),
         "kind": "token", "secret": server.token},
        format="json",
    ).json()  # fmt: skip
    return api.post(
        f"/api/sessions/{session_id}/push/",
        {"branch": branch, "credential_id": credential["id"]},
        format="json",
    )


def test_clone_work_push_and_clone_the_pushed_branch_back(api, server, tmp_path):
    url = server.make_repo("roundtrip", FILES, extra_commits=2)
    session = _clone(api, url)
    sid = session["id"]
    run_turn(api, sid, "Add a module\nwrite src/new.py NEW = 2\nappend README.md more")
    run_turn(api, sid, "Drop the util\ndelete src/lib/util.py")
    answer = _push(api, sid, server)
    assert answer.status_code == 200, answer.json()
    pushed = answer.json()
    assert pushed["branch"] == "agent/work" and pushed["remote"] == url
    assert server.head("roundtrip", "agent/work") == pushed["commit"]
    worktree = Session.objects.get(id=sid).worktree
    assert server.read_tree("roundtrip", "agent/work") == _files(worktree)
    # One commit per user turn on top of the cloned commit, each titled by its prompt.
    log = subprocess.run(
        ["git", "--git-dir", str(server.bare("roundtrip")), "log", "--format=%s",
         f"{session['source']['commit']}..agent/work"],
        capture_output=True, text=True, check=True,
    ).stdout.split("\n")  # fmt: skip
    assert log[:2] == ["Drop the util", "Add a module"]
    # The pushed branch, cloned back with plain git, holds exactly the worktree's files.
    back = tmp_path / "back"
    subprocess.run(
        ["git", "clone", "-q", "--branch", "agent/work", url, str(back)],
        env=server.git_env(tmp_path), check=True, capture_output=True,
    )  # fmt: skip
    assert _files(back) == _files(worktree)
    # The main branch was not touched; the push is in the history.
    assert server.head("roundtrip", "main") == session["source"]["commit"]
    assert HistoryEvent.objects.filter(session_id=sid, kind="push").exists()


def test_a_push_never_forces_an_existing_branch(api, server, tmp_path):
    url = server.make_repo("race", FILES)
    session = _clone(api, url)
    run_turn(api, session["id"], "write mine.txt mine")
    # Someone else moves main on the server meanwhile.
    other = tmp_path / "other"
    env = server.git_env(tmp_path)
    subprocess.run(["git", "clone", "-q", url, str(other)], env=env, check=True)
    (other / "theirs.txt").write_text("theirs")
    for args in (["add", "-A"], ["commit", "-qm", "theirs"],
                 [*server.auth_args(), "push", "-q", "origin", "main"]):  # fmt: skip
        subprocess.run(["git", "-C", str(other), *args], env=env, check=True)
    moved = server.head("race", "main")
    answer = _push(api, session["id"], server, branch="main")
    assert answer.status_code == 409, answer.json()
    assert "fast-forward" in answer.json()["error"]["message"]
    assert server.head("race", "main") == moved
    # A new branch name goes through.
    assert _push(api, session["id"], server, branch="agent/mine").status_code == 200


def test_push_is_refused_for_a_session_not_from_a_repository_and_for_outsiders(
    api, outsider_api, server, sid
):
    assert api.post(f"/api/sessions/{sid}/push/", {"branch": "x"}, format="json").status_code == 400
    url = server.make_repo("guarded", FILES)
    session = _clone(api, url)
    assert (
        outsider_api.post(
            f"/api/sessions/{session['id']}/push/", {"branch": "x"}, format="json"
        ).status_code
        == 404
    )
    for bad in ("-f", "a..b", "../x", "x.lock", "", "a b", "refs/../x"):
        answer = api.post(f"/api/sessions/{session['id']}/push/", {"branch": bad}, format="json")
        assert answer.status_code == 400, bad


def test_revert_before_the_clone_empties_the_worktree_and_unrevert_brings_it_back(api, server):
    url = server.make_repo("history", FILES)
    session = _clone(api, url)
    sid = session["id"]
    run_turn(api, sid, "write extra.txt more")
    worktree = Session.objects.get(id=sid).worktree
    first = Message.objects.filter(session_id=sid).order_by("id").first()
    answer = api.post(f"/api/sessions/{sid}/revert/", {"message_id": first.id}, format="json")
    assert answer.status_code == 200, answer.json()
    assert _files(worktree) == {}
    assert (worktree / ".git").is_dir()  # the user's repository is not a snapshot's to remove
    assert api.post(f"/api/sessions/{sid}/unrevert/").status_code == 200
    assert _files(worktree) == {**_bytes(FILES), "extra.txt": b"more"}


@pytest.mark.parametrize(
    ("setting", "value", "words"),
    [
        ("REPO_MAX_FILES", 2, "REPO_MAX_FILES"),
        ("REPO_MAX_BYTES", 20_000, "REPO_MAX_BYTES"),
        ("REPO_CLONE_TIMEOUT", 0.001, "REPO_CLONE_TIMEOUT"),
    ],
)
def test_a_clone_past_a_limit_fails_with_a_sentence_and_leaves_nothing(
    api, server, settings, setting, value, words
):
    big = {**FILES, **{f"data/{i}.bin": os.urandom(4096).hex() for i in range(10)}}
    url = server.make_repo(f"big-{setting.lower()}", big)
    setattr(settings, setting, value)
    session = _clone(api, url)
    assert words in session["source"]["error"], session["source"]
    worktree = Session.objects.get(id=session["id"]).worktree
    assert list(worktree.iterdir()) == []
    staging = worktree.parent / fill.STAGING
    assert not staging.exists() or list(staging.iterdir()) == []
    # The session is usable: an empty worktree, idle.
    run_turn(api, session["id"], "write a.txt 1")


def test_no_run_starts_while_the_repository_is_cloning_and_delete_cancels_it(
    api, server, settings, monkeypatch
):
    url = server.make_repo("slow", FILES)
    started = []
    original = fill.prepare

    def held(session_id: str, job: str) -> None:
        started.append(session_id)
        wait_until(lambda: not Session.objects.filter(id=session_id).exists(), timeout=30)
        original(session_id, job)  # finds its session gone: writes nothing

    monkeypatch.setattr(fill, "prepare", held)
    answer = api.post("/api/sessions/", {"repository": {"url": url}}, format="json").json()
    wait_until(lambda: started)
    run = api.post(
        f"/api/sessions/{answer['id']}/runs/",
        {"messages": [{"role": "user", "content": "hi"}], "multitask_strategy": "enqueue"},
        format="json",
    )
    assert run.status_code == 409
    assert "cloned" in run.json()["error"]["message"]
    assert api.delete(f"/api/sessions/{answer['id']}/").status_code == 204


def test_a_stale_prepare_job_writes_nothing(api, server):
    """One writer: a job whose lease another holder took (or whose session went) records
    no clone and moves no files."""
    url = server.make_repo("stale", FILES)
    session = _clone(api, url)
    before = Message.objects.filter(session_id=session["id"]).count()
    Session.objects.filter(id=session["id"]).update(
        source={**session["source"], "commit": None}, busy_run_id="prep_other"
    )
    fill.prepare(session["id"], "prep_stale")
    assert Message.objects.filter(session_id=session["id"]).count() == before
    row = Session.objects.get(id=session["id"])
    assert row.busy_run_id == "prep_other"
    with pytest.raises(Exception, match="taken over"):
        fill._finish(session["id"], "prep_stale", Path("/nonexistent"), {}, "x", seed=False)


def _zip(members: dict[str, str]) -> bytes:
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, body in members.items():
            zf.writestr(name, body)
    return out.getvalue()


def test_an_uploaded_archive_is_the_worktree_and_its_first_history_event(api):
    from django.core.files.uploadedfile import SimpleUploadedFile

    archive = SimpleUploadedFile("site.zip", _zip({"site/a.html": "<p>", "site/b.css": "p{}"}))
    answer = api.post("/api/sessions/upload/", {"file": archive, "title": "Site"})
    assert answer.status_code == 201, answer.json()
    session = answer.json()
    assert session["source"] == {"type": "upload", "name": "site.zip", "files": 2}
    worktree = Session.objects.get(id=session["id"]).worktree
    assert _files(worktree) == {"site/a.html": b"<p>", "site/b.css": b"p{}"}
    first = Message.objects.get(session_id=session["id"])
    assert (
        api.post(
            f"/api/sessions/{session['id']}/revert/", {"message_id": first.id}, format="json"
        ).status_code
        == 200
    )
    assert _files(worktree) == {}


def test_a_dropped_folder_is_uploaded_with_its_paths(api):
    from django.core.files.uploadedfile import SimpleUploadedFile

    answer = api.post(
        "/api/sessions/upload/",
        {
            "files": [SimpleUploadedFile("a.py", b"A"), SimpleUploadedFile("b.py", b"B")],
            "paths": ["proj/a.py", "proj/pkg/b.py"],
        },
    )
    assert answer.status_code == 201, answer.json()
    assert answer.json()["title"] == "proj"
    worktree = Session.objects.get(id=answer.json()["id"]).worktree
    assert _files(worktree) == {"proj/a.py": b"A", "proj/pkg/b.py": b"B"}


@pytest.mark.parametrize(
    "members",
    [{"../escape.txt": "x"}, {"/etc/x": "x"}, {"ok.txt": "1", "a/../../out": "x"}],
)
def test_a_refused_archive_leaves_no_session_and_no_files(api, members, settings):
    from django.core.files.uploadedfile import SimpleUploadedFile

    answer = api.post(
        "/api/sessions/upload/", {"file": SimpleUploadedFile("bad.zip", _zip(members))}
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["message"]
    assert not Session.objects.exists()
    root = Path(settings.WORKSPACE_ROOT)
    assert [p for p in root.iterdir() if p.name.startswith("ses_")] == []


def test_an_upload_past_the_byte_limit_is_refused_before_it_is_read(api, settings):
    from django.core.files.uploadedfile import SimpleUploadedFile

    settings.REPO_MAX_BYTES = 1000
    big = SimpleUploadedFile("big.zip", os.urandom(4 * 1024 * 1024))
    answer = api.post("/api/sessions/upload/", {"file": big})
    assert answer.status_code == 413
    assert "REPO_MAX_BYTES" in answer.json()["error"]["message"]
    assert not Session.objects.exists()


def test_files_the_snapshots_do_not_keep_are_listed_and_a_revert_leaves_them_alone(
    api, sid, settings
):
    settings.SNAPSHOT_MAX_FILE_BYTES = 100
    run_turn(api, sid, "write small.txt ok")
    worktree = Session.objects.get(id=sid).worktree
    (worktree / "big.bin").write_bytes(b"x" * 500)
    (worktree / ".gitignore").write_text("build/\n")
    (worktree / "build").mkdir()
    (worktree / "build" / "out.o").write_bytes(b"o")
    run_turn(api, sid, "write later.txt 2")
    listed = api.get(f"/api/sessions/{sid}/files/?not_kept=1").json()
    reasons = {f["path"]: f["reason"] for f in listed["files"]}
    assert listed["count"] == 2 and reasons == {"big.bin": "large", "build/": "ignored"}
    first = Message.objects.filter(session_id=sid, role="user").order_by("id").first()
    reverted = api.post(f"/api/sessions/{sid}/revert/", {"message_id": first.id}, format="json")
    assert reverted.json()["revert"]["not_kept"]["count"] == 2
    assert (worktree / "big.bin").read_bytes() == b"x" * 500  # left alone
    assert (worktree / "build" / "out.o").exists()
    assert not (worktree / "small.txt").exists()


def test_a_fork_of_a_cloned_session_pushes_to_the_same_origin(api, server, outsider_api):
    url = server.make_repo("forked", FILES, extra_commits=1)
    session = _clone(api, url)
    run_turn(api, session["id"], "write mine.txt one")
    fork = api.post(f"/api/sessions/{session['id']}/fork/", {}, format="json").json()
    assert fork["source"]["url"] == url and fork["source"]["commit"] == session["source"]["commit"]
    run_turn(api, fork["id"], "write forked.txt two")
    pushed = _push(api, fork["id"], server, branch="agent/from-fork")
    assert pushed.status_code == 200, pushed.json()
    assert server.read_tree("forked", "agent/from-fork") == {
        **_bytes(FILES),
        "mine.txt": b"one",
        "forked.txt": b"two",
    }
    # Another user's fork (through a share) keeps none of the origin, nor the owner's
    # credential (tests/test_share_fork_origin.py).
    Session.objects.filter(id=session["id"]).update(
        source={**Session.objects.get(id=session["id"]).source, "credential_id": "crd_x"}
    )
    token = api.post(f"/api/sessions/{session['id']}/share/").json()["token"]
    theirs = outsider_api.post(f"/api/shared/{token}/fork/", {}, format="json").json()
    assert Session.objects.get(id=theirs["id"]).source == {"type": "share"}


def test_a_credential_deleted_before_the_clone_runs_fails_it_with_a_sentence(
    api, server, monkeypatch
):
    url = server.make_repo("gone", FILES, private=True)
    credential = api.post(
        "/api/credentials/",
        {
            "name": "t",
            "host": "127.0.0.1",
            "port": _port(server),
            "kind": "token",
            "secret": server.token,
        },
        format="json",
    ).json()
    original = fill.prepare

    def later(session_id: str, job: str) -> None:
        Credential.objects.filter(id=credential["id"]).delete()
        original(session_id, job)

    monkeypatch.setattr(fill, "prepare", later)
    session = _clone(api, url, credential_id=credential["id"])
    assert session["source"]["error"] == "No such credential."
