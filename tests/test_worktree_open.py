"""Worktree files are opened by descriptor, never through a link, never blocking (docs/semantics.md
§11.2; security findings 2 and 3). The agent's shell can swap a file and a link atomically
(``renameat2(RENAME_EXCHANGE)``) as fast as it likes: a server that checks a name and then
opens it loses that race. Here another process swaps two names in a tight loop while the file
viewer, the listing and the file tools are called thousands of times; nothing outside the
worktree may come back or change, and no call may hang on a FIFO."""

from __future__ import annotations

import ctypes
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from core.errors import InvalidInput, NotFoundError
from runs_app.execution.loop.gate import approval_preview
from runs_app.tools import TOOLS, ToolContext, ToolError
from sessions_app.selectors import worktree_entry
from sessions_app.services.sessions import create_session

SECRET = b"top-secret-of-another-session"
RACE_SECONDS = 3.0

# The swapper: its own process, so that it swaps while the server's code runs (in a thread of
# this process it would mostly wait for the GIL). renameat2 is glibc's wrapper; SYS_renameat2
# (316 on x86_64) where the C library lacks it.
SWAPPER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b, seconds = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2]), float(sys.argv[3])
if hasattr(libc, "renameat2"):
    swap = lambda: libc.renameat2(-100, a, -100, b, 2)
else:
    swap = lambda: libc.syscall(316, -100, a, -100, b, 2)
end = time.monotonic() + seconds
print("ready", flush=True)
while time.monotonic() < end:
    for _ in range(2000):
        if swap() != 0:
            sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
"""


def _exchange_works(tmp_path: Path) -> bool:
    a, b = tmp_path / "probe-a", tmp_path / "probe-b"
    a.write_text("a")
    b.symlink_to("a")
    libc = ctypes.CDLL(None, use_errno=True)
    if hasattr(libc, "renameat2"):
        done = libc.renameat2(-100, bytes(a), -100, bytes(b), 2)
    else:
        done = libc.syscall(316, -100, bytes(a), -100, bytes(b), 2)
    a.unlink()
    b.unlink()
    return done == 0


@pytest.fixture
def race(tmp_path):
    if not _exchange_works(tmp_path):
        pytest.skip("renameat2(RENAME_EXCHANGE) is not available here")

    @contextmanager
    def swapping(a: Path, b: Path) -> Iterator[None]:
        proc = subprocess.Popen(
            [sys.executable, "-c", SWAPPER, str(a), str(b), str(RACE_SECONDS + 30)],
            stdout=subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
            yield
        finally:
            proc.kill()
            proc.wait()

    return swapping


def for_a_while(call: Callable[[], None], *, seconds: float = RACE_SECONDS) -> int:
    """Call ``call`` until ``seconds`` have passed: how many times."""
    end, count = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        call()
        count += 1
    return count


def within(seconds: float, call: Callable[[], None]) -> None:
    """Run ``call`` in a thread; fail if it has not returned after ``seconds`` (a read
    blocked on a FIFO never returns by itself)."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            failure.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "a call blocked (a FIFO was opened and waited on)"
    if failure:
        raise failure[0]


def release_fifos(*paths: Path) -> None:
    """Open each FIFO among ``paths`` for writing: a reader blocked on it (the old code) wakes
    up, so a failing test does not leave a thread hanging."""
    for path in paths:
        try:
            if stat.S_ISFIFO(path.lstat().st_mode):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


@pytest.fixture
def session(owner, tmp_path):
    session = create_session(owner=owner)
    session.worktree.mkdir(parents=True, exist_ok=True)
    return session


@pytest.fixture
def outside(tmp_path):
    """Another session's files: a directory with a secret, outside the worktree."""
    other = tmp_path / "other-session"
    other.mkdir()
    (other / "secret.txt").write_bytes(SECRET)
    return other


class Crashed(Exception):
    """What the viewer should never raise (a 500): kept apart so that a secret read is what
    a test reports first."""


def content_of(session, path: str) -> bytes | list | None | type[Crashed]:
    """What the file viewer's selector gives for ``path``: the bytes of a file, a listing,
    None for a refusal (400, 404), ``Crashed`` for anything else."""
    try:
        found = worktree_entry(session, path)
    except (InvalidInput, NotFoundError):
        return None
    except OSError:
        return Crashed
    if isinstance(found, list):
        return found
    with found:
        return found.read()


# -- finding 2: the file viewer reads nothing outside -----------------------------------------
def test_it_never_serves_a_file_swapped_for_a_link_to_another_sessions_file(session, outside, race):
    wt = session.worktree
    (wt / "x").write_bytes(b"mine")
    (wt / "y").symlink_to(outside / "secret.txt")
    seen: set[bytes | None] = set()

    def view() -> None:
        body = content_of(session, "x")
        seen.add(body)
        assert body != SECRET, "the viewer followed a link swapped in after its check"

    with race(wt / "x", wt / "y"):
        calls = for_a_while(view)
    assert calls > 1_000
    assert seen <= {b"mine", None}


def test_the_file_api_never_serves_a_file_swapped_for_a_link(api, session, outside, race):
    wt = session.worktree
    (wt / "x").write_bytes(b"mine")
    (wt / "y").symlink_to(outside / "secret.txt")
    statuses: set[int] = set()
    api.raise_request_exception = False  # a 500 is counted, the secret is what fails first

    def get() -> None:
        response = api.get(f"/api/sessions/{session.id}/files/x")
        statuses.add(response.status_code)
        if response.status_code == 200:
            body = b"".join(response.streaming_content)  # read to the end: closed
            assert body != SECRET, "the API followed a link swapped in after its check"

    with race(wt / "x", wt / "y"):
        for_a_while(get)
    assert statuses <= {200, 400}


def test_a_link_at_the_end_of_the_path_is_not_followed(api, session, outside):
    wt = session.worktree
    (wt / "link").symlink_to(outside / "secret.txt")
    (wt / "inner").write_text("inside")
    (wt / "inner-link").symlink_to("inner")
    (wt / "dir-link").symlink_to(outside, target_is_directory=True)
    for path in ("link", "inner-link", "dir-link/secret.txt", "dir-link"):
        response = api.get(f"/api/sessions/{session.id}/files/{path}")
        assert response.status_code == 400, path
        assert "link" in response.json()["error"]["message"]
    listing = api.get(f"/api/sessions/{session.id}/files/").json()
    # Listed as the links they are (their own size), never entered.
    assert {e["path"] for e in listing} == {"link", "inner", "inner-link", "dir-link"}
    assert b"".join(api.get(f"/api/sessions/{session.id}/files/inner").streaming_content) == (
        b"inside"
    )


# -- finding 2, directories: a listing walks nothing outside ----------------------------------
def test_a_listing_never_walks_a_directory_swapped_for_a_link(session, outside, race):
    wt = session.worktree
    (wt / "d").mkdir()
    (wt / "d" / "mine.txt").write_text("x")
    (wt / "y").symlink_to(outside, target_is_directory=True)
    seen: set[str] = set()

    def view() -> None:
        for path in ("d", ""):
            listing = content_of(session, path)
            if isinstance(listing, list):
                names = {e["path"] for e in listing}
                seen.update(names)
                assert not any("secret" in n for n in names), "a listing walked outside"
            else:
                assert listing is not Crashed

    with race(wt / "d", wt / "y"):
        for_a_while(view)
    assert "d/mine.txt" in seen


# -- finding 3: FIFOs never block --------------------------------------------------------------
def test_a_file_swapped_for_a_fifo_never_blocks_the_viewer(session, race):
    wt = session.worktree
    (wt / "x").write_bytes(b"mine")
    os.mkfifo(wt / "y")
    try:
        with race(wt / "x", wt / "y"):
            within(RACE_SECONDS + 5, lambda: for_a_while(lambda: content_of(session, "x")))
    finally:
        release_fifos(wt / "x", wt / "y")


def test_the_file_api_answers_a_fifo_at_once_with_a_400(api, session):
    os.mkfifo(session.worktree / "pipe")
    os.mkfifo(session.worktree / "y")
    # The request runs in this thread (the test's database transaction is this thread's); a
    # watchdog opens the FIFO's other end if it blocks, so that a failure ends.
    watchdog = threading.Timer(5, release_fifos, [session.worktree / "pipe"])
    watchdog.start()
    started = time.monotonic()
    try:
        response = api.get(f"/api/sessions/{session.id}/files/pipe")
    finally:
        watchdog.cancel()
    assert time.monotonic() - started < 4, "the request waited on the FIFO"
    assert response.status_code == 400
    assert "FIFO" in response.json()["error"]["message"]
    # A listing names it, with its size (0), and never opens it.
    listing = api.get(f"/api/sessions/{session.id}/files/").json()
    assert {e["path"] for e in listing} == {"pipe", "y"}


def test_bad_paths_are_400_and_missing_ones_404(api, session):
    (session.worktree / "a.txt").write_text("x")
    for path in ("a.txt/b", "nothing", "nothing/deeper"):
        assert api.get(f"/api/sessions/{session.id}/files/{path}").status_code == 404, path
    for path in ("../x", "d/../../x", "%2e%2e/x"):
        response = api.get(f"/api/sessions/{session.id}/files/{path}")
        assert response.status_code in (400, 404), path
        assert response.status_code != 500


# -- the file tools ----------------------------------------------------------------------------
@pytest.fixture
def ctx(tmp_path):
    wt = tmp_path / "wt"
    wt.mkdir()
    return ToolContext(worktree=wt, should_abort=lambda: False)


def tool(ctx: ToolContext, name: str, crashes: list[OSError], **args: str) -> str | None:
    """The tool's output, None for a refusal; an OSError (which no tool should let out) is
    kept in ``crashes`` so that a read or write outside is what a test reports first."""
    try:
        return TOOLS[name].run(ctx, args)
    except ToolError:
        return None
    except OSError as exc:
        crashes.append(exc)
        return None


def outside_state(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


@pytest.mark.parametrize("name", ["read", "write", "append", "delete"])
def test_file_tools_never_act_through_a_parent_swapped_for_a_link(ctx, outside, race, name):
    wt = ctx.worktree
    (wt / "sub").mkdir()
    (wt / "sub" / "secret.txt").write_text("mine")
    (wt / "y").symlink_to(outside, target_is_directory=True)
    before, crashes = outside_state(outside), []
    args = {"path": "sub/secret.txt"}
    if name in ("write", "append"):
        args["content"] = "overwritten"

    def call() -> None:
        output = tool(ctx, name, crashes, **args)
        assert SECRET.decode() not in (output or ""), "read through a swapped-in link"

    with race(wt / "sub", wt / "y"):
        for_a_while(call)
    assert outside_state(outside) == before
    assert crashes == []


@pytest.mark.parametrize("name", ["read", "write", "append", "delete"])
def test_file_tools_never_act_through_a_leaf_swapped_for_a_link(ctx, outside, race, name):
    wt = ctx.worktree
    (wt / "x").write_text("mine")
    (wt / "y").symlink_to(outside / "secret.txt")
    before, crashes = outside_state(outside), []
    args = {"path": "x"}
    if name in ("write", "append"):
        args["content"] = "overwritten"

    def call() -> None:
        output = tool(ctx, name, crashes, **args)
        assert SECRET.decode() not in (output or ""), "read through a swapped-in link"

    with race(wt / "x", wt / "y"):
        for_a_while(call, seconds=1.5)
    assert outside_state(outside) == before
    assert crashes == []


def test_file_tools_refuse_links_and_fifos_without_blocking(ctx, outside):
    wt = ctx.worktree
    (wt / "out").symlink_to(outside, target_is_directory=True)
    (wt / "leaf").symlink_to(outside / "secret.txt")
    os.mkfifo(wt / "pipe")
    before = outside_state(outside)
    for name, args in [
        ("write", {"path": "out/new.txt", "content": "x"}),
        ("write", {"path": "out/deeper/new.txt", "content": "x"}),
        ("append", {"path": "out/secret.txt", "content": "x"}),
        ("write", {"path": "leaf", "content": "x"}),
        ("delete", {"path": "leaf"}),
        ("delete", {"path": "out/secret.txt"}),
        ("read", {"path": "leaf"}),
        ("list", {"path": "out"}),
    ]:
        with pytest.raises(ToolError, match="symlink"):
            TOOLS[name].run(ctx, args)
    try:
        for name, args in [
            ("read", {"path": "pipe"}),
            ("write", {"path": "pipe", "content": "x"}),
            ("append", {"path": "pipe", "content": "x"}),
        ]:
            with pytest.raises(ToolError, match="FIFO"):
                within(5, lambda name=name, args=args: TOOLS[name].run(ctx, args))
    finally:
        release_fifos(wt / "pipe")
    assert outside_state(outside) == before
    assert sorted(TOOLS["list"].run(ctx, {}).splitlines()) == ["leaf", "out", "pipe"]
    assert os.readlink(wt / "leaf") == str(outside / "secret.txt")


def test_writes_create_their_parents_inside(ctx):
    assert TOOLS["write"].run(ctx, {"path": "a/b/c.txt", "content": "hi"}).startswith("Wrote 2")
    assert (ctx.worktree / "a" / "b" / "c.txt").read_text() == "hi"
    (ctx.worktree / "a" / "file").write_text("x")
    with pytest.raises(ToolError) as raised:
        TOOLS["write"].run(ctx, {"path": "a/file/c.txt", "content": "hi"})
    assert "Not a directory" in str(raised.value)


def test_the_approval_preview_reads_as_the_tools_do(ctx, outside):
    (ctx.worktree / "leaf").symlink_to(outside / "secret.txt")
    (ctx.worktree / "notes.txt").write_text("old\n")
    preview = approval_preview(ctx.worktree, "append", {"path": "leaf", "content": "x"})
    assert SECRET.decode() not in preview
    preview = approval_preview(ctx.worktree, "append", {"path": "notes.txt", "content": "new"})
    assert " old\n" in preview and "+new\n" in preview
