"""Issue 42's rule: no content a user or the agent can put in a worktree makes any endpoint
answer 5xx or leaves a session that cannot be used. A property test: random hostile worktree
states (nested repositories in every state, names git refuses, special files, unreadable
files and directories, deep and wide trees, huge files, hard links, links leading out,
attributes, odd names) are planted as a shell would leave them, then driven through every
reader (a step's snapshot, diff, a file's diff, the file viewer, compare, blame, archive,
patch, push, export, fork, share and its fork, revert, unrevert); every answer is below 500,
and a new run completes after.

``HOSTILE_EXAMPLES`` (default 10) sets how many states hypothesis draws; the draws are the
same on every run (``derandomize``), so CI is repeatable, and a larger number searches more.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from django.test import Client
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from sessions_app.models import Message, Session
from tests.conftest import client_for, new_session, run_turn
from tests.support.planting import planted

from .test_nested_repos import STATES

pytestmark = pytest.mark.django_db(transaction=True)
EXAMPLES = int(os.environ.get("HOSTILE_EXAMPLES", "10"))


def _nested(state: str) -> Callable[[Path], list[str]]:
    def plant(root: Path) -> list[str]:
        nested = root / f"nested-{state}"
        nested.mkdir()
        STATES[state](nested)
        (nested / "f.txt").write_text("inside\n")
        return [f"nested-{state}/f.txt"]

    return plant


def _refused_names(root: Path) -> list[str]:
    made = []
    for name in (".GIT/config", "git~1/x", ".git./y", "d/.Git/config", "GIT~1/z"):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("[core]\n\tfsmonitor = /bin/false\n")
        made.append(name)
    return made


def _special(root: Path) -> list[str]:
    (root / "special").mkdir()
    os.mkfifo(root / "special" / "fifo")
    directory = os.open(root / "special", os.O_RDONLY | os.O_DIRECTORY)
    listener = socket.socket(socket.AF_UNIX)
    try:  # a short name for a long path: a socket's path is at most 107 bytes
        listener.bind(f"/proc/self/fd/{directory}/sock")
    finally:
        listener.close()
        os.close(directory)
    os.symlink("fifo", root / "special" / "to-fifo")
    return ["special/fifo", "special/sock", "special/to-fifo"]


def _unreadable(root: Path) -> list[str]:
    (root / "locked").mkdir()
    (root / "locked" / "inside.txt").write_text("hidden\n")
    (root / "secret.txt").write_text("no\n")
    (root / "secret.txt").chmod(0)
    (root / "locked").chmod(0)
    return ["secret.txt", "locked/inside.txt"]


def _deep(root: Path) -> list[str]:
    relative = "/".join(["deep"] * 150) + "/bottom.txt"
    (root / relative).parent.mkdir(parents=True)
    (root / relative).write_text("bottom\n")
    return [relative]


def _wide(root: Path) -> list[str]:
    (root / "wide").mkdir()
    for i in range(2000):
        (root / "wide" / f"{i:04}.txt").write_bytes(b"")
    return ["wide/0000.txt"]


def _huge(root: Path) -> list[str]:
    # Past SNAPSHOT_MAX_FILE_BYTES (kept out of snapshots), within WORKTREE_MAX_BYTES (the
    # shell's size watch kills and undoes a command that writes more); sparse: no disk.
    with open(root / "huge.bin", "wb") as out:
        out.truncate(24 * 1024**2)
    return ["huge.bin"]


def _hard_links(root: Path) -> list[str]:
    (root / "linked.txt").write_text("one inode\n")
    for i in range(40):
        os.link(root / "linked.txt", root / f"link-{i}.txt")
    return ["linked.txt", "link-7.txt"]


def _links_out(root: Path) -> list[str]:
    os.symlink("/etc/passwd", root / "passwd")
    os.symlink("../../..", root / "up")
    os.symlink("loop-b", root / "loop-a")
    os.symlink("loop-a", root / "loop-b")
    os.symlink("nowhere", root / "dangling")
    return ["passwd", "up", "loop-a", "dangling", "up/etc/passwd"]


def _attributes(root: Path) -> list[str]:
    (root / ".gitattributes").write_text(
        "* text eol=crlf filter=evil diff=evil ident\n*.w working-tree-encoding=UTF-32\n"
    )
    (root / "x.w").write_bytes(b"no bom\n")
    (root / "id.txt").write_text("$Id$\n")
    return [".gitattributes", "x.w", "id.txt"]


def _odd_names(root: Path) -> list[str]:
    names = ["new\nline.txt", "-rf", "colon:x", "sp ace", "ü.txt", "x" * 255]
    for name in names:
        (root / name).write_text("odd\n")
    (root / os.fsdecode(b"bad-\xff\xfe.txt")).write_text("bytes\n")
    return names


def _nested_fifo_head_swept(root: Path) -> list[str]:
    """A FIFO where git looks for a nested repository's HEAD: the sandbox refuses to make one
    and sweeps any it finds; planted here the way an old session might hold one, and swept as
    the next shell command would."""
    from workspace import worktree_usage

    (root / "trap" / ".git" / "objects").mkdir(parents=True)
    (root / "trap" / ".git" / "refs").mkdir()
    os.mkfifo(root / "trap" / ".git" / "HEAD")
    (root / "trap" / "t.txt").write_text("t\n")
    _, _, special = worktree_usage.usage(root)
    worktree_usage.remove_special(root, special)
    return ["trap/t.txt"]


PLANTS: dict[str, Callable[[Path], list[str]]] = {
    **{f"nested-{state}": _nested(state) for state in STATES},
    "refused-names": _refused_names,
    "special": _special,
    "unreadable": _unreadable,
    "deep": _deep,
    "wide": _wide,
    "huge": _huge,
    "hard-links": _hard_links,
    "links-out": _links_out,
    "attributes": _attributes,
    "odd-names": _odd_names,
    "fifo-head": _nested_fifo_head_swept,
}


def _readers(api, sid: str, first: int, second: int, paths: list[str]) -> list[tuple[str, str]]:  # noqa: ANN001
    """Every reader of the worktree and its history, as (method, path) pairs."""
    quoted = [p.replace("\n", "%0A").replace("#", "%23").replace("?", "%3F") for p in paths]
    calls = [
        ("get", f"/api/sessions/{sid}/diff/"),
        ("get", f"/api/sessions/{sid}/diff/?message_id={second}"),
        ("get", f"/api/sessions/{sid}/files/"),
        ("get", f"/api/sessions/{sid}/compare/?a={first}&b={second}"),
        ("get", f"/api/sessions/{sid}/archive/"),
        ("get", f"/api/sessions/{sid}/patch/"),
        ("get", f"/api/sessions/{sid}/patch/?format=mbox"),
        ("get", f"/api/sessions/{sid}/export/?format=json"),
        ("get", f"/api/sessions/{sid}/checkpoints/"),
    ]
    for path in quoted:
        calls += [
            ("get", f"/api/sessions/{sid}/diff/?file={path}"),
            ("get", f"/api/sessions/{sid}/files/{path}"),
            ("get", f"/api/sessions/{sid}/blame/{path}"),
            ("get", f"/api/sessions/{sid}/compare/?a={first}&b={second}&file={path}"),
        ]
    return calls


def _no_5xx(client, method: str, path: str, **body) -> object:  # noqa: ANN001
    answer = getattr(client, method)(path, body or None, format="json")
    assert answer.status_code < 500, (method, path, answer.status_code, answer.content[:400])
    return answer


def _restore_rights(root: Path) -> None:
    """Let pytest's tmp cleanup and the next example delete what ``_unreadable`` locked."""
    for directory, dirs, _ in os.walk(root):
        for name in dirs:
            path = Path(directory, name)
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | stat.S_IRWXU)


@given(plants=st.lists(st.sampled_from(sorted(PLANTS)), min_size=1, max_size=4, unique=True))
@example(plants=sorted(PLANTS))  # everything at once
@hsettings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_no_hostile_worktree_makes_a_reader_answer_5xx_or_the_session_unusable(
    api, owner, outsider, plants
):
    sid = new_session(api)
    run_turn(api, sid, "write base.txt one")
    session = Session.objects.get(id=sid)
    paths: list[str] = []
    for name in plants:
        paths += PLANTS[name](session.worktree)
    try:
        run_turn(api, sid, "write base.txt two")  # the step's snapshots take it all in
        first, second = Message.objects.filter(session_id=sid, role="user").order_by("id")[:2]
        for method, path in _readers(api, sid, first.id, second.id, paths):
            _no_5xx(api, method, path)
        _no_5xx(api, "post", f"/api/sessions/{sid}/push/", branch="agent/x")
        fork = _no_5xx(api, "post", f"/api/sessions/{sid}/fork/")
        link = _no_5xx(api, "post", f"/api/sessions/{sid}/share/").json()
        stranger = client_for(outsider)
        pages = Client()
        pages.force_login(owner)
        _no_5xx(pages, "get", f"/sessions/{sid}/")  # the chat, as the browser loads it
        _no_5xx(pages, "get", link["url"])  # the shared page
        _no_5xx(stranger, "get", f"/api/shared/{link['token']}/")
        for path in paths[:3]:
            _no_5xx(stranger, "get", f"/api/shared/{link['token']}/files/{path}")
        shared_fork = _no_5xx(stranger, "post", f"/api/shared/{link['token']}/fork/")
        revert = _no_5xx(api, "post", f"/api/sessions/{sid}/revert/", message_id=second.id)
        assert revert.status_code == 200, revert.json()
        assert _no_5xx(api, "post", f"/api/sessions/{sid}/unrevert/").status_code == 200
        # Usable after: a run completes in the session and in both forks.
        run_turn(api, sid, "write after.txt ok")
        assert (session.worktree / "after.txt").read_text() == "ok"
        if fork.status_code == 201:
            run_turn(api, fork.json()["id"], "write in-fork.txt ok")
        if shared_fork.status_code == 201:
            run_turn(stranger, shared_fork.json()["id"], "write in-share.txt ok")
    finally:
        _restore_rights(session.worktree)


def test_a_file_name_that_is_not_utf8_is_shown_not_a_500(api, owner):
    """Found by the test above: the diff's JSON and the shared page could not encode a name
    git gives as bytes that are not UTF-8 (held as lone surrogates)."""
    sid = new_session(api)
    session = Session.objects.get(id=sid)
    run_turn(api, sid, "write base.txt one")
    (session.worktree / os.fsdecode(b"caf\xe9.txt")).write_text("latin-1 name\n")
    planted(session.worktree)
    run_turn(api, sid, "write base.txt two")
    diff = api.get(f"/api/sessions/{sid}/diff/")
    assert diff.status_code == 200
    assert "caf\\udce9.txt" in diff.content.decode(), "the byte kept as an escape"
    link = api.post(f"/api/sessions/{sid}/share/").json()
    page = Client()
    page.force_login(owner)
    shared = page.get(link["url"])
    assert shared.status_code == 200
    assert "caf\ufffd.txt" in shared.content.decode()
