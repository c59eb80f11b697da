"""Work out of a session (issue 26, docs/semantics.md §13.3): the worktree at any point as a zip or
a tar.gz, the change between two points as a unified diff or a ``git am`` mailbox — each
round-tripped through the real tools (``zipfile``/``tarfile``, ``git apply``, ``git am``)
against the files the session really had at those points."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import time
import warnings
import zipfile
from pathlib import Path

import pytest

from sessions_app.models import Message, Session
from sessions_app.services import downloads
from tests.support.planting import planted
from workspace import snapshots

from .conftest import run_turn

pytestmark = pytest.mark.django_db(transaction=True)

TURN_1 = "write a.txt one\nwrite dir/b.txt two"
TURN_2 = "Second turn: tidy up\nappend a.txt three\ndelete dir/b.txt\nwrite c.txt four"


def _body(response) -> bytes:  # noqa: ANN001
    if not response.streaming:
        return response.content
    with warnings.catch_warnings():  # the test client reads an async stream synchronously
        warnings.simplefilter("ignore")
        return b"".join(response)


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def _two_turns(api, sid: str) -> tuple[dict[str, bytes], dict[str, bytes], str]:  # noqa: ANN001
    """The files after each turn, as the worktree held them, and turn 1's last message."""
    worktree = Session.objects.get(id=sid).worktree
    run_turn(api, sid, TURN_1)
    after_1 = _files(worktree)
    first_end = Message.objects.filter(session_id=sid).order_by("-id").first().id
    run_turn(api, sid, TURN_2)
    return after_1, _files(worktree), first_end


def _unzip(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {i.filename: archive.read(i) for i in archive.infolist() if not i.is_dir()}


def _untar(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}


def test_an_archive_is_the_worktree_at_any_point(api, sid):
    after_1, after_2, first_end = _two_turns(api, sid)
    assert after_1 != after_2
    head = api.get(f"/api/sessions/{sid}/archive/")
    assert head.status_code == 200 and head["Content-Type"] == "application/zip"
    assert head["Content-Disposition"].startswith("attachment; filename=")
    assert _unzip(_body(head)) == after_2
    earlier = api.get(f"/api/sessions/{sid}/archive/?format=tar.gz&message_id={first_end}")
    assert earlier.status_code == 200 and earlier["Content-Type"] == "application/gzip"
    assert _untar(_body(earlier)) == after_1


def test_an_archive_streams_in_batches(api, sid, settings):
    settings.DOWNLOAD_BATCH_BYTES = 1  # one file a batch
    _, after_2, _ = _two_turns(api, sid)
    response = api.get(f"/api/sessions/{sid}/archive/")
    assert response.streaming
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chunks = [chunk for chunk in response if chunk]
    assert len(chunks) >= 2, "each batch leaves before the next is read"
    assert _unzip(b"".join(chunks)) == after_2


def _git(cwd: Path, *args: str, input: bytes | None = None) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        input=input,
        capture_output=True,
        check=True,
    ).stdout.decode()


def _materialise(root: Path, files: dict[str, bytes]) -> None:
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(body)


def test_a_diff_applies_onto_the_files_it_starts_from(api, sid, tmp_path):
    after_1, after_2, first_end = _two_turns(api, sid)
    whole = api.get(f"/api/sessions/{sid}/patch/")
    assert whole.status_code == 200 and whole["Content-Type"] == "text/x-diff"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    _git(fresh, "init", "-q")
    _git(fresh, "apply", "--index", "-", input=_body(whole))
    assert _files(fresh) == after_2, "from the session's start (empty) to the head"

    part = api.get(f"/api/sessions/{sid}/patch/?from={first_end}")
    base = tmp_path / "base"
    base.mkdir()
    _git(base, "init", "-q")
    _materialise(base, after_1)
    _git(base, "apply", "-", input=_body(part))
    assert _files(base) == after_2, "from the end of turn 1 to the head"


def test_a_mailbox_holds_one_commit_per_turn_that_git_am_applies(api, sid, tmp_path):
    _, after_2, _ = _two_turns(api, sid)
    response = api.get(f"/api/sessions/{sid}/patch/?format=mbox")
    assert response.status_code == 200 and response["Content-Type"] == "application/mbox"
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "start")
    mbox = _body(response)
    _git(repo, "am", "-q", input=mbox)
    assert _files(repo) == after_2
    subjects = _git(repo, "log", "--format=%s", "-n", "2").splitlines()
    assert subjects == ["Second turn: tidy up", "write a.txt one"]
    assert _git(repo, "log", "--format=%an", "-n", "1").strip() == "alice"
    time.sleep(1.1)  # a clock in the commits would show now
    again = _body(api.get(f"/api/sessions/{sid}/patch/?format=mbox"))
    assert again == mbox, "the same commits: no new objects at each download"


def test_files_the_snapshots_do_not_keep_are_listed(api, sid, settings):
    settings.SNAPSHOT_MAX_FILE_BYTES = 20
    run_turn(api, sid, "write small.txt ok\nwrite big.txt " + "x" * 40)
    response = api.get(f"/api/sessions/{sid}/archive/")
    assert response["X-Not-Kept-Count"] == "1"
    data = _body(response)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.namelist() == ["small.txt"]
        assert b"big.txt (large)" in archive.comment
    patch = api.get(f"/api/sessions/{sid}/patch/")
    text = _body(patch)
    assert text.startswith(b"# 1 files not kept") and b"big.txt (large)" in text


def test_downloads_refuse_bad_input_with_a_sentence(api, sid):
    _, _, first_end = _two_turns(api, sid)
    last = Message.objects.filter(session_id=sid).order_by("-id").first().id
    cases = [
        ("archive/?format=rar", 400),
        ("patch/?format=tar", 400),
        ("archive/?message_id=msg_nope", 404),
        (f"patch/?from={last}&to={first_end}", 400),  # from after to
    ]
    for query, code in cases:
        response = api.get(f"/api/sessions/{sid}/{query}")
        assert response.status_code == code, (query, response.content)
        assert response.json()["error"]["message"], query


def test_an_outsider_downloads_nothing(api, sid, outsider_api):
    run_turn(api, sid, TURN_1)
    for query in ("archive/", "archive/?format=tar.gz", "patch/", "patch/?format=mbox"):
        assert outsider_api.get(f"/api/sessions/{sid}/{query}").status_code == 404, query
    other = outsider_api.post("/api/sessions/", {"title": "o"}, format="json").json()["id"]
    mine = Message.objects.filter(session_id=sid).first().id
    answer = outsider_api.get(f"/api/sessions/{other}/archive/?message_id={mine}")
    assert answer.status_code == 404, "another session's message is not a point of this one"


def test_one_file_downloads_as_it_is(api, sid, outsider_api):
    run_turn(api, sid, "write dir/b.txt <b>not html</b>")
    shown = api.get(f"/api/sessions/{sid}/files/dir/b.txt")
    assert shown["Content-Type"].startswith("text/plain") and "attachment" not in shown.get(
        "Content-Disposition", ""
    )
    got = api.get(f"/api/sessions/{sid}/files/dir/b.txt?download=1")
    assert got.status_code == 200 and got["Content-Type"] == "application/octet-stream"
    assert got["Content-Disposition"] == 'attachment; filename="b.txt"'
    assert b"".join(got.streaming_content) == b"<b>not html</b>"
    assert api.get(f"/api/sessions/{sid}/files/dir/b.txt?download=maybe").status_code == 400
    assert outsider_api.get(f"/api/sessions/{sid}/files/dir/b.txt?download=1").status_code == 404


# -- a patch's size (issue 42: every bound holds before the resource is spent) ------------------
def _with_files(api, sid: str, files: dict[str, bytes]) -> None:  # noqa: ANN001
    """A turn, then ``files`` put in the worktree, then a turn that snapshots them: the
    patch from the session's start holds them."""
    run_turn(api, sid, "write a.txt one")
    worktree = Session.objects.get(id=sid).worktree
    for name, body in files.items():
        (worktree / name).write_bytes(body)
    planted(worktree)
    run_turn(api, sid, "write b.txt two")


def _git_runs(monkeypatch) -> list[list[str]]:  # noqa: ANN001
    """The arguments of every git the snapshots start from now on."""
    runs: list[list[str]] = []
    run = snapshots.Snapshots._run

    def recording(self, args, **kwargs):  # noqa: ANN001, ANN003, ANN202
        runs.append(list(args))
        return run(self, args, **kwargs)

    monkeypatch.setattr(snapshots.Snapshots, "_run", recording)
    return runs


@pytest.mark.parametrize("fmt", ["diff", "mbox"])
def test_a_patch_past_the_limit_is_refused_before_git_writes_it(
    api, sid, settings, monkeypatch, fmt
):
    _with_files(api, sid, {"big.bin": os.urandom(8000)})
    settings.DOWNLOAD_PATCH_MAX_BYTES = 4000
    runs = _git_runs(monkeypatch)
    response = api.get(f"/api/sessions/{sid}/patch/?format={fmt}")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "ValidationError" and "download an archive" in error["message"]
    assert runs, "the sizes were read from git"
    written = [a for a in runs if a[0] == "format-patch" or (a[0] == "diff-tree" and "-p" in a)]
    assert written == [], "no git wrote the patch (the server held all of it, then refused)"


def test_a_large_mailbox_is_refused_without_waiting_for_git(api, sid, settings, monkeypatch):
    # The mailbox of 180 MB took git's whole timeout to write, then answered 500. Here a
    # ``format-patch`` takes that timeout whatever it writes: a large mailbox never starts one.
    _with_files(api, sid, {"big.bin": os.urandom(8000)})
    settings.DOWNLOAD_PATCH_MAX_BYTES = 4000
    run = snapshots.Snapshots._run
    started: list[list[str]] = []

    def format_patch_times_out(self, args, **kwargs):  # noqa: ANN001, ANN003, ANN202
        if args[0] == "format-patch":  # one that would take git's whole timeout
            started.append(args)
            raise snapshots.SnapshotError("git format-patch: no answer after 3s")
        return run(self, args, **kwargs)

    monkeypatch.setattr(snapshots.Snapshots, "_run", format_patch_times_out)
    response = api.get(f"/api/sessions/{sid}/patch/?format=mbox")
    assert response.status_code == 400 and "archive" in response.json()["error"]["message"]
    assert started == [], "refused before any format-patch started"


def test_a_patch_streams_byte_for_byte_what_git_writes(api, sid):
    _with_files(api, sid, {"data.bin": os.urandom(300_000), "c.txt": b"three\n" * 1000})
    response = api.get(f"/api/sessions/{sid}/patch/")
    assert response.status_code == 200 and response.streaming
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chunks = [chunk for chunk in response if chunk]
    assert len(chunks) > 2, "sent as git writes it, not whole"
    session = Session.objects.get(id=sid)
    head = downloads.point(session, None).tree
    args = ["diff-tree", "-r", "-p", "--binary", "--full-index", "--no-renames", "--no-color"]
    whole = snapshots.for_session(session).check([*args, snapshots.EMPTY_TREE, head])
    assert b"".join(chunks) == whole, "what the download gave before it streamed"


def test_a_patch_git_writes_past_the_limit_anyway_is_cut_with_a_line_saying_so(
    api, sid, settings, tmp_path
):
    # Empty lines: each takes two bytes in the diff ("+\n"), more than the estimate counts.
    _with_files(api, sid, {"lines.txt": b"\n" * 3000})
    settings.DOWNLOAD_PATCH_MAX_BYTES = 5000
    response = api.get(f"/api/sessions/{sid}/patch/")
    assert response.status_code == 200
    body = _body(response)
    note = b"\n# The patch was cut at 5,000 bytes (DOWNLOAD_PATCH_MAX_BYTES): it is incomplete"
    assert body.endswith(b"download an archive instead.\n") and note in body
    assert len(body) - len(body[body.index(note) :]) == 5000
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    _git(fresh, "init", "-q")
    with pytest.raises(subprocess.CalledProcessError):
        _git(fresh, "apply", "--check", "-", input=body)
