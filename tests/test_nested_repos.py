"""Issue 42, finding 4: a repository nested in the worktree, in any state, is kept as plain
files (its ``.git`` left out) and never bricks the session. ``mkdir a && cd a && git init -q
&& echo x > f`` made every later run end ``error`` (``does not have a commit checked out``),
and diff, a file's diff and revert answer 500; even ``rm -rf a/.git`` did not repair it. A
FIFO where git looks for a nested repository's ``HEAD`` hung every snapshot."""

from __future__ import annotations

import os
import shutil
import socket
import stat
from pathlib import Path

import pytest

from sessions_app.models import Message, Part, Session
from tests.conftest import new_session, run_turn
from workspace import sandbox, snapshots, worktree_usage

from .support.planting import planted
from .support.shell import shell_on
from .test_git_confinement import system_git

pytestmark = pytest.mark.django_db(transaction=True)


def _empty(root: Path) -> None:  # the finding: a repository with no commit yet
    system_git(root, "init", "-q")


def _committed_detached(root: Path) -> None:
    system_git(root, "init", "-q")
    (root / "c.txt").write_text("c\n")
    system_git(root, "add", "c.txt")
    system_git(root, "commit", "-q", "-m", "c")
    system_git(root, "checkout", "-q", "--detach")


def _bare(root: Path) -> None:
    system_git(root, "init", "-q", "--bare", "inner.git")


def _broken_head(root: Path) -> None:
    system_git(root, "init", "-q")
    (root / ".git" / "HEAD").write_text("ref: refs/heads/../../nowhere\n")


def _gitfile_elsewhere(root: Path) -> None:
    (root / ".git").write_text("gitdir: /nonexistent/elsewhere\n")


def _gitfile_to_an_empty_repository(root: Path) -> None:
    system_git(root.parent, "init", "-q", "--bare", "hidden.git")
    (root / ".git").write_text("gitdir: ../hidden.git\n")


def _git_link_outside(root: Path) -> None:
    os.symlink("/", root / ".git")


def _unreadable_git(root: Path) -> None:
    system_git(root, "init", "-q")
    (root / ".git").chmod(0)


def _submodule_without_checkout(root: Path) -> None:
    (root.parent / ".gitmodules").write_text(f'[submodule "m"]\n\tpath = {root.name}\n\turl = x\n')
    (root / ".git").write_text("gitdir: ../.git/modules/m\n")


STATES = {
    "empty": _empty,
    "detached": _committed_detached,
    "bare": _bare,
    "broken-head": _broken_head,
    "gitfile-elsewhere": _gitfile_elsewhere,
    "gitfile-to-empty": _gitfile_to_an_empty_repository,
    "git-link-outside": _git_link_outside,
    "unreadable-git": _unreadable_git,
    "submodule-no-checkout": _submodule_without_checkout,
}


def _snapshot_files(snap: snapshots.Snapshots, tree: str) -> set[str]:
    out = snap.git("ls-tree", "-r", "--name-only", "-z", tree)
    return {name for name in out.split("\0") if name}


@pytest.mark.parametrize("state", list(STATES))
def test_a_nested_repository_in_any_state_is_plain_files_and_the_session_works(api, state):
    sid = new_session(api)
    run_turn(api, sid, "write top.txt one")
    session = Session.objects.get(id=sid)
    nested = session.worktree / "a"
    nested.mkdir()
    STATES[state](nested)
    (nested / "f").write_text("x\n")
    planted(session.worktree)

    run_turn(api, sid, "write a/g hello")  # the step's snapshots, in the worker
    snap = snapshots.for_session(session)
    files = _snapshot_files(snap, snap.peek())
    assert {"top.txt", "a/f", "a/g"} <= files, files
    assert not any(name.startswith("a/.git/") or name == "a/.git" for name in files), files

    second = Message.objects.filter(session_id=sid, role="user").order_by("id")[1]
    for path in ("diff/", "diff/?file=a/f", "files/", "files/a/f/"):
        answer = api.get(f"/api/sessions/{sid}/{path}")
        assert answer.status_code < 500, (path, answer.status_code, answer.content[:300])
    assert api.get(f"/api/sessions/{sid}/diff/?file=a/f").json()["patch"].count("+x") == 1
    revert = api.post(f"/api/sessions/{sid}/revert/", {"message_id": second.id}, format="json")
    assert revert.status_code == 200, revert.json()
    assert not (nested / "g").exists()
    assert api.post(f"/api/sessions/{sid}/unrevert/").status_code == 200
    assert (nested / "g").read_text() == "hello"
    run_turn(api, sid, "write top.txt two")  # and the next run completes


def test_removing_the_nested_git_repairs_nothing_because_nothing_was_broken(api):
    """The finding's own sequence: the empty repository, a run, ``rm -rf a/.git``, a run."""
    sid = new_session(api)
    session = Session.objects.get(id=sid)
    (session.worktree / "a").mkdir()
    _empty(session.worktree / "a")
    (session.worktree / "a" / "f").write_text("x\n")
    run_turn(api, sid, "write b.txt 1")
    shutil.rmtree(session.worktree / "a" / ".git")
    planted(session.worktree)
    run_turn(api, sid, "write b.txt 2")
    snap = snapshots.for_session(session)
    assert {"a/f", "b.txt"} <= _snapshot_files(snap, snap.peek())


def test_a_worktree_gitattributes_changes_no_snapshot_byte(api):
    """A ``.gitattributes`` naming a working-tree encoding made every ``git add`` die
    (``BOM is required``); one converting line endings made a revert change them."""
    sid = new_session(api)
    session = Session.objects.get(id=sid)
    (session.worktree / ".gitattributes").write_text(
        "*.txt text eol=crlf\nwide.txt working-tree-encoding=UTF-32\n"
    )
    (session.worktree / "wide.txt").write_bytes(b"no byte order mark\n")
    (session.worktree / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    run_turn(api, sid, "write b.txt 1")
    run_turn(api, sid, "write crlf.txt changed")
    first = Message.objects.filter(session_id=sid, role="user").order_by("id")[1]
    revert = api.post(f"/api/sessions/{sid}/revert/", {"message_id": first.id}, format="json")
    assert revert.status_code == 200, revert.json()
    assert (session.worktree / "crlf.txt").read_bytes() == b"one\r\ntwo\r\n"
    assert (session.worktree / "wide.txt").read_bytes() == b"no byte order mark\n"


def test_special_files_are_found_by_the_usage_walk_and_removed_without_being_opened(tmp_path):
    root = tmp_path / "wt"
    (root / "a" / ".git").mkdir(parents=True)
    os.mkfifo(root / "a" / ".git" / "HEAD")
    (root / "f.txt").write_text("x")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(root / "sock"))
    try:
        size, entries, special = worktree_usage.usage(root)
        assert sorted(special) == ["a/.git/HEAD", "sock"]
        assert (size, entries) == (1, 5)
        assert worktree_usage.remove_special(root, special) == special
    finally:
        listener.close()
    assert not (root / "sock").exists() and not (root / "a" / ".git" / "HEAD").exists()
    assert (root / "f.txt").read_text() == "x"


@pytest.fixture
def shell_ready(settings) -> None:
    shell_on(settings)


def test_the_sandbox_makes_no_fifo_and_leaves_no_special_file(api, shell_ready):
    sid = new_session(api)
    session = Session.objects.get(id=sid)
    run = run_turn(
        api,
        sid,
        "shell mkdir -p a/.git/objects a/.git/refs && echo x > a/f && "
        '(mkfifo a/.git/HEAD; echo mkfifo=$?) && python3 -c "import socket; '
        "socket.socket(socket.AF_UNIX).bind('a/sock')\" && echo done",
    )
    assert run["status"] == "completed"
    head = session.worktree / "a" / ".git" / "HEAD"
    assert not head.exists() or stat.S_ISREG(head.lstat().st_mode)
    assert not (session.worktree / "a" / "sock").exists()
    tool = Part.objects.filter(session_id=sid, type=Part.Type.TOOL).order_by("id").last()
    output = tool.state["output"]
    assert "removed 1 special file(s)" in output, output
    if not any("seccomp" in line for line in sandbox.limitations()):
        assert "mkfifo=1" in output, output
    run_turn(api, sid, "write a/g fine")  # no snapshot waits on anything
    snap = snapshots.for_session(session)
    assert {"a/f", "a/g"} <= _snapshot_files(snap, snap.peek())


def _tar(members: list[tuple[str, bytes | None]], links: dict[str, str] | None = None) -> bytes:
    """A tar of ``(name, content)`` (None: a directory) and ``{link: target}`` hard links."""
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, body in members:
            info = tarfile.TarInfo(name)
            if body is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.LNKTYPE, target
            tar.addfile(info)
    return out.getvalue()


def test_an_uploaded_tree_holding_an_empty_repository_becomes_a_working_session(api):
    """The finding's tar: ``a/.git`` of a repository with no commit, and ``a/f``."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    members = [
        ("a", None),
        ("a/.git", None),
        ("a/.git/HEAD", b"ref: refs/heads/main\n"),
        ("a/.git/config", b"[core]\n\trepositoryformatversion = 0\n"),
        ("a/.git/objects", None),
        ("a/.git/refs", None),
        ("a/.git/refs/heads", None),
        ("a/f", b"x\n"),
    ]
    upload = SimpleUploadedFile("nested.tar", _tar(members))
    answer = api.post("/api/sessions/upload/", {"file": upload})
    assert answer.status_code == 201, answer.json()
    sid = answer.json()["id"]
    assert api.get(f"/api/sessions/{sid}/diff/?file=a/f").status_code == 200
    run_turn(api, sid, "write b.txt 1")
    snap = snapshots.for_session(Session.objects.get(id=sid))
    assert {"a/f", "b.txt"} <= _snapshot_files(snap, snap.peek())


def test_an_upload_of_hard_links_past_the_limit_answers_400_with_a_sentence(api, settings):
    """Finding 2 as a user meets it: one file and 300 hard links to it, within the upload's
    byte limit as a body, past it as a worktree."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    settings.REPO_MAX_BYTES = 1024 * 1024
    links = {f"copy-{i}.bin": "big.bin" for i in range(300)}
    upload = SimpleUploadedFile("links.tar", _tar([("big.bin", b"z" * 9 * 1024)], links))
    answer = api.post("/api/sessions/upload/", {"file": upload})
    assert answer.status_code == 400, answer.content
    assert "more than 1,048,576 bytes" in answer.json()["error"]["message"]
    assert not Session.objects.exists()
