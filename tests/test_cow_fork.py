"""Issue 43: a fork's files are its source's, by hard link, and no writer ever reaches a
shared file. Every writer there is is used in the fork (the write and append tools; in the
shell ``>>``, ``sed -i``, ``truncate``, ``dd conv=notrunc``, ``chmod``, ``open(p, "r+")``, an
``mmap`` write, ``mv``, ``rm``; revert and unrevert), and after each the source's files are
byte for byte and inode for inode what they were; then the other way round. The same with the
overlay off (the fallback: a command writes into the worktree, shared files get copies of
their own first). Real bubblewrap, real overlayfs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from sessions_app.models import Message, Session
from tests.conftest import new_session, run_turn
from workspace import layers, sandbox

from .support.shell import shell_on

pytestmark = pytest.mark.django_db(transaction=True)

FILES = ["append.txt", "sed.txt", "trunc.txt", "dd.txt", "chmod.sh", "rplus.txt", "mmap.txt"]
WRITERS = [
    "shell echo more >> append.txt",
    "shell sed -i s/x/y/ sed.txt",
    "shell truncate -s 2 trunc.txt",
    "shell printf ZZ | dd of=dd.txt conv=notrunc status=none",
    "shell chmod 0700 chmod.sh",
    "shell python3 -c \"f = open('rplus.txt', 'r+'); f.write('Q'); f.close()\"",
    "shell python3 -c \"import mmap; f = open('mmap.txt', 'r+b'); "
    "m = mmap.mmap(f.fileno(), 0); m[0:1] = b'M'; m.flush()\"",
    "shell mv sed.txt moved.txt && rm trunc.txt",
    "write tool.txt rewritten by the write tool",
    "append tool.txt and appended",
]


@pytest.fixture(params=["auto", "off"])
def overlay(request, settings) -> str:
    shell_on(settings)
    settings.AGENT_SHELL_OVERLAY = request.param
    return request.param


def fingerprint(root: Path) -> dict[str, tuple[int, str, int]]:
    """Every regular file beneath ``root`` (its ``.git`` aside): inode, content, mode."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            info = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found[str(path.relative_to(root))] = (info.st_ino, digest, info.st_mode)
    return found


def _source(api) -> tuple[str, Session]:  # noqa: ANN001
    sid = new_session(api)
    script = "\n".join(f"write {name} x1x2x3" for name in [*FILES, "tool.txt"])
    run_turn(api, sid, script)
    run_turn(api, sid, "write second.txt turn two")
    return sid, Session.objects.get(id=sid)


def _fork(api, sid: str) -> Session:  # noqa: ANN001
    answer = api.post(f"/api/sessions/{sid}/fork/", {}, format="json")
    assert answer.status_code == 201, answer.json()
    return Session.objects.get(id=answer.json()["id"])


def test_no_writer_in_a_fork_reaches_a_file_it_shares_with_its_source(api, overlay):
    sid, source = _source(api)
    fork = _fork(api, sid)
    before = fingerprint(source.worktree)
    shared = fingerprint(fork.worktree)
    assert {k: v[1] for k, v in shared.items()} == {k: v[1] for k, v in before.items()}
    if sandbox.uses_layers(fork.worktree):
        assert shared == before, "the fork's files are the source's inodes"
    for writer in WRITERS:
        run_turn(api, fork.id, writer)
        assert fingerprint(source.worktree) == before, writer
    assert (fork.worktree / "append.txt").read_text() == "x1x2x3more\n"
    assert (fork.worktree / "moved.txt").read_text() == "y1x2x3"
    assert (fork.worktree / "dd.txt").read_text() == "ZZx2x3"
    assert (fork.worktree / "mmap.txt").read_text() == "M1x2x3"
    assert (fork.worktree / "tool.txt").read_text() == "rewritten by the write tooland appended\n"
    first = Message.objects.filter(session_id=fork.id, role="user").order_by("id")[2]
    revert = api.post(f"/api/sessions/{fork.id}/revert/", {"message_id": first.id}, format="json")
    assert revert.status_code == 200, revert.json()
    assert fingerprint(source.worktree) == before, "revert"
    assert api.post(f"/api/sessions/{fork.id}/unrevert/").status_code == 200
    assert fingerprint(source.worktree) == before, "unrevert"


def test_no_writer_in_the_source_reaches_its_forks_files(api, overlay):
    sid, source = _source(api)
    fork = _fork(api, sid)
    before = fingerprint(fork.worktree)
    for writer in WRITERS[:7]:
        run_turn(api, sid, writer)
        assert fingerprint(fork.worktree) == before, writer


def test_a_fork_of_a_fork_shares_the_same_files_and_snapshots_agree(api, overlay):
    sid, source = _source(api)
    first = _fork(api, sid)
    second = _fork(api, first.id)
    assert fingerprint(second.worktree).keys() == fingerprint(source.worktree).keys()
    if sandbox.uses_layers(second.worktree):
        assert (second.worktree / "dd.txt").stat().st_nlink == 3
    run_turn(api, second.id, "shell echo changed > dd.txt")
    assert (source.worktree / "dd.txt").read_text() == "x1x2x3"
    assert api.get(f"/api/sessions/{second.id}/diff/?file=dd.txt").json()["patch"].count("+") >= 1


def test_a_command_killed_mid_write_leaves_the_worktree_as_before(api, overlay, settings):
    settings.AGENT_SHELL_TIMEOUT = 1
    sid, source = _source(api)
    before = fingerprint(source.worktree)
    run_turn(api, sid, "shell echo partial >> append.txt; rm dd.txt; sleep 5")
    if sandbox.uses_layers(source.worktree):
        assert fingerprint(source.worktree) == before, "its layer dropped"
    else:
        assert (source.worktree / "append.txt").read_text().endswith("partial\n")
    assert not list((source.worktree.parent / layers.LAYERS).glob(f"{sid}-*"))


def test_the_write_tools_new_file_fits_beside_a_name_of_any_length(api):
    """The new file is written under a short name of its own, then renamed: a name of 250
    bytes (125 two-byte characters) is written and appended to like any other."""
    sid = new_session(api)
    name = "é" * 125
    run_turn(api, sid, f"write {name} one")
    run_turn(api, sid, f"append {name} two")
    worktree = Session.objects.get(id=sid).worktree
    assert (worktree / name).read_text() == "onetwo\n"
    assert sorted(p.name for p in worktree.iterdir()) == [name]
