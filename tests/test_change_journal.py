"""Issue 43, snapshots without a walk: a step's snapshot takes the paths its writers said they
changed (``workspace/change_journal.py``), a shell command's bound is checked against a kept
usage figure (``workspace/kept_usage.py``), and whatever the journal says, the snapshot it
gives is the one a walk of the whole worktree gives."""

from __future__ import annotations

import asyncio
import io
import shutil
import tarfile
from pathlib import Path

import pytest

from runs_app.tools import TOOLS, ToolContext, ToolInterrupted
from tests.support.shell import shell_on
from workspace import (
    change_journal,
    journal_track,
    kept_usage,
    layers,
    sandbox,
    skipped_files,
    worktree_files,
    worktree_paths,
)
from workspace.snapshots import Snapshots
from workspace.worktree_usage import worktree_usage


@pytest.fixture
def snap(tmp_path: Path) -> Snapshots:
    worktree = tmp_path / "ws" / "ses_j"
    worktree.mkdir(parents=True)
    (worktree / "keep.txt").write_text("keep\n")
    (worktree / "dir").mkdir()
    for i in range(5):
        (worktree / "dir" / f"f{i}.txt").write_text(f"{i}\n")
    snap = Snapshots(git_dir=tmp_path / "ws" / ".snapshots" / "ses_j.git", worktree=worktree)
    snap.track()  # the walk that makes the journal trusted
    return snap


def _write(snap: Snapshots, relative: str, text: str) -> None:
    worktree_files.replace_file(
        snap.worktree, tuple(relative.split("/")), text.encode(), append=False
    )


def _files(snap: Snapshots, tree: str) -> list[str]:
    return sorted(snap.git("ls-tree", "-r", "--name-only", "-z", tree).split("\0")[:-1])


def test_a_snapshot_takes_the_paths_said_and_no_others(snap):
    """What no writer said stays out of the journal's snapshot (no walk was made), and is in
    the walk's: the journal is what the step's snapshot is built from."""
    _write(snap, "said.txt", "said\n")
    (snap.worktree / "unsaid.txt").write_text("planted\n")  # no writer said it
    by_journal = snap.track(journal=True)
    assert "said.txt" in _files(snap, by_journal)
    assert "unsaid.txt" not in _files(snap, by_journal)
    walked = snap.track()
    assert "unsaid.txt" in _files(snap, walked)


def test_deletes_and_checkouts_reach_the_snapshot(snap):
    before = snap.track(journal=True)
    worktree_files.delete_file(snap.worktree, ("dir", "f0.txt"))
    _write(snap, "new/deep/n.txt", "n\n")
    after = snap.track(journal=True)
    assert snap.patch(before, after) == ["dir/f0.txt", "new/deep/n.txt"]
    snap.checkout(before, ["dir/f0.txt", "new/deep/n.txt"])  # a history move's write
    assert snap.track(journal=True) == before
    assert snap.track() == before


def test_a_journal_that_cannot_be_trusted_walks(snap, tmp_path):
    (snap.worktree / "planted.txt").write_text("p\n")
    change_journal.forget(snap.worktree)  # a writer that cannot say what it wrote
    assert "planted.txt" in _files(snap, snap.track(journal=True))
    (snap.worktree / "inside").mkdir()
    (snap.worktree / "inside" / "x").write_text("x\n")
    change_journal.record(snap.worktree, ["inside/.git/HEAD", "inside/x"])  # a nested repo
    assert "inside/x" in _files(snap, snap.track(journal=True))
    (snap.worktree / "many").mkdir()
    names = [f"many/{i}" for i in range(change_journal.MAX_PATHS + 1)]
    for name in names:
        (snap.worktree / name).write_text("m")
    change_journal.record(snap.worktree, names)
    assert len(_files(snap, snap.track(journal=True))) > change_journal.MAX_PATHS
    # A session made anew under the same name (its worktree and git dir): its old journal
    # is not trusted.
    shutil.rmtree(snap.worktree)
    shutil.rmtree(snap.git_dir)
    snap.worktree.mkdir()
    (snap.worktree / "fresh.txt").write_text("f\n")
    assert _files(snap, snap.track(journal=True)) == ["fresh.txt"]


def test_peek_takes_the_journal_without_using_it_up(snap):
    _write(snap, "a.txt", "a\n")
    peeked = snap.peek(journal=True)
    assert "a.txt" in _files(snap, peeked)
    assert snap.track(journal=True) == peeked


def test_names_are_paths_not_patterns(snap):
    for name in ("star*.txt", "q?.txt", "[ab].txt", ":(top)x", "new\nline", "sp ace"):
        _write(snap, name, name)
    (snap.worktree / "starX.txt").write_text("not said\n")
    (snap.worktree / "a.txt").write_text("not said\n")
    files = _files(snap, snap.track(journal=True))
    assert {"star*.txt", "q?.txt", "[ab].txt", ":(top)x", "sp ace"} <= set(files)
    assert "starX.txt" not in files and "a.txt" not in files


# -- through the shell: each command's layer is its journal -------------------------------------
SEQUENCES = [
    ["echo hi >> keep.txt", "rm -rf dir", "mkdir dir && echo back > dir/x"],
    ["mv dir moved", "ln -s moved link", "sed -i s/1/one/ moved/f1.txt"],
    ["rm keep.txt && mkdir keep.txt && echo d > keep.txt/in", "rm -rf keep.txt"],
    ["mkdir -p node_modules/p && echo x > node_modules/p/i.js", "echo y > 'a b*'"],
    ["rm -rf dir && echo file > dir", "touch t1 && rm t1", "truncate -s 100 dir"],
    ["git init -q sub && echo s > sub/s", "echo t > sub/t", "rm -rf sub/.git"],
    ["git init -q . && git add keep.txt && echo x > keep.txt", "rm -rf .git && echo y > y"],
    ["mkdir -p deep/a/b && cp -r dir deep/a/b/c", "chmod +x deep/a/b/c/f2.txt"],
    ["echo 'build/' > .gitignore && mkdir build && echo o > build/o", "rm .gitignore"],
    ["rm -rf dir && ln -s keep.txt dir", "rm dir && mkdir -p dir/x && echo y > dir/x/y"],
    [
        "echo l1 > \"$(printf 'caf\\351.txt')\"",
        'd="$(printf \'d\\377\')" && mkdir "$d" && touch "$d/x"',
    ],
]


def _shell(worktree: Path, command: str, *, may_write=lambda: True) -> str:  # noqa: ANN001
    outcome = asyncio.run(
        sandbox.run(
            worktree,
            command,
            on_output=_ignore,
            should_stop=lambda: False,
            may_write=may_write,
        )
    )
    assert outcome.exit_code == 0, outcome
    return outcome.output


async def _ignore(text: str) -> None:
    return None


@pytest.mark.parametrize("overlay", ["auto", "off"])
@pytest.mark.parametrize("sequence", SEQUENCES, ids=[s[0][:20] for s in SEQUENCES])
def test_after_any_commands_the_journal_and_the_walk_agree(snap, settings, overlay, sequence):
    shell_on(settings)
    settings.AGENT_SHELL_OVERLAY = overlay
    settings.WORKTREE_MAX_BYTES = 10_000_000
    kept_usage.known(snap.worktree)
    for command in sequence:
        _shell(snap.worktree, command)
        by_journal = snap.track(journal=True)
        # The same tree a walk gives, in a scratch index: the session's is left as it was.
        assert by_journal == snap.peek(), command
        assert kept_usage.known(snap.worktree) == worktree_usage(snap.worktree), command


def test_a_shell_write_without_a_layer_makes_the_next_snapshot_walk(snap, settings):
    shell_on(settings)
    settings.AGENT_SHELL_OVERLAY = "off"
    _shell(snap.worktree, "echo z > z.txt")
    assert change_journal.pending(snap.worktree, snap.git_dir).paths is None


def test_a_command_of_a_run_that_lost_its_lease_reaches_nothing(snap, settings):
    """One writer: a layer is merged only while the run holds its lease; a stale worker's
    command leaves the worktree as it was (and its tool call ends interrupted)."""
    shell_on(settings)
    if not sandbox.uses_layers(snap.worktree):
        pytest.skip("no overlay here: the command writes in place (the loop stops first)")
    before = snap.track()
    ctx = ToolContext(worktree=snap.worktree, should_abort=lambda: False, holds_lease=lambda: False)
    with pytest.raises(ToolInterrupted):
        TOOLS["shell"].run(ctx, {"command": "echo stale > keep.txt && touch other"})
    assert (snap.worktree / "keep.txt").read_text() == "keep\n"
    assert not (snap.worktree / "other").exists()
    assert snap.track() == before
    assert not any((snap.worktree.parent / layers.LAYERS).glob("ses_j-*"))


def test_the_kept_usage_follows_the_tools(snap):
    assert kept_usage.known(snap.worktree) == worktree_usage(snap.worktree)
    _write(snap, "x/y/z.txt", "z" * 1000)
    _write(snap, "keep.txt", "k")
    worktree_files.delete_file(snap.worktree, ("dir", "f3.txt"))
    assert kept_usage.read(snap.worktree) == worktree_usage(snap.worktree)


def test_what_a_step_left_out_is_listed_from_its_paths_alone(snap, settings):
    """``skipped`` for a step: beneath the paths the journal names, against the step's tree
    (an empty index, not the session's), as the walk's listing says of the same files."""
    settings.SNAPSHOT_MAX_FILE_BYTES = 100
    (snap.worktree / "elsewhere.bin").write_bytes(b"x" * 500)  # not the step's: not listed
    snap.track()
    _write(snap, "node_modules/p/i.js", "x")
    _write(snap, "big.bin", "y" * 500)
    _write(snap, "small.txt", "z")
    said = change_journal.pending(snap.worktree, snap.git_dir).paths
    tree = snap.track(journal=True)
    step = skipped_files.skipped(snap, said, tree)
    assert step == [
        {"path": "big.bin", "reason": "large"},
        {"path": "node_modules/", "reason": "excluded"},
    ]
    everything = skipped_files.skipped(snap)
    assert {"path": "elsewhere.bin", "reason": "large"} in everything
    assert all(entry in everything for entry in step)


@pytest.mark.django_db(transaction=True)
def test_an_upload_is_hashed_before_the_session_row_is_locked(api, monkeypatch):
    """Found by the whole-run benchmark: a 50,000-file upload held a transaction open while
    git hashed every file, past PostgreSQL's idle-in-transaction limit on a loaded machine (a
    500). Git runs first; the row is held only to record. Its first run then snapshots from
    the journal (the upload's index is the session's, no walk)."""
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.db import connection

    from sessions_app.models import Session
    from tests.conftest import run_turn

    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for i in range(20):
            body = f"file {i}\n".encode()
            info = tarfile.TarInfo(f"d/f{i}.txt")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    in_transaction = []
    original = Snapshots.track

    def track(self, **kwargs):  # noqa: ANN001, ANN003, ANN202
        in_transaction.append(connection.in_atomic_block)
        return original(self, **kwargs)

    monkeypatch.setattr(Snapshots, "track", track)
    upload = SimpleUploadedFile("files.tar", data.getvalue())
    answer = api.post("/api/sessions/upload/", {"file": upload})
    assert answer.status_code == 201, answer.json()
    assert in_transaction == [False]
    session = Session.objects.get(id=answer.json()["id"])
    assert change_journal.pending(session.worktree, session.snapshot_dir).paths == []
    run_turn(api, session.id, "write d/f1.txt changed")
    assert (session.worktree / "d" / "f1.txt").read_text() == "changed"


def test_the_worktrees_own_git_dir_is_no_reason_to_walk(snap):
    """A cloned session's agent runs git in its worktree: what git writes in the worktree's
    own ``.git`` is never snapshotted, so it asks for no walk; a nested one does."""
    change_journal.record(snap.worktree, [".git/index", ".git", "a.txt"])
    assert change_journal.pending(snap.worktree, snap.git_dir).paths == ["a.txt"]
    change_journal.record(snap.worktree, ["sub/.git/index"])
    assert change_journal.pending(snap.worktree, snap.git_dir).paths is None


def test_a_journal_taken_whole_starts_anew_past_its_size(snap, monkeypatch):
    monkeypatch.setattr(change_journal, "REWRITE_BYTES", 64)
    for i in range(10):
        _write(snap, f"n{i}.txt", "x")
    tree = snap.track(journal=True)
    assert change_journal.size(snap.worktree) == 0, "started anew"
    _write(snap, "after.txt", "y")
    assert change_journal.pending(snap.worktree, snap.git_dir).paths == ["after.txt"]
    assert "n9.txt" in _files(snap, tree) and snap.track(journal=True) == snap.peek()


def test_a_link_read_for_a_step_is_read_in_its_folder_never_through_a_link(
    snap, tmp_path, monkeypatch
):
    """A folder swapped for a link between the look and the read: the link's target is read
    in the folder the worktree holds (``readlinkat``), never through the swapped-in link."""
    (snap.worktree / "dir" / "l").symlink_to("inside")
    assert "dir/l" in _files(snap, snap.track())  # a walk: the link is tracked
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "l").symlink_to("/the/servers/secret")
    change_journal.record(snap.worktree, ["dir/l"])
    real_present = worktree_paths.present

    def present(worktree, relative, known):  # noqa: ANN001, ANN202
        found = real_present(worktree, relative, known)
        if relative == "dir/l" and not (snap.worktree / "dir").is_symlink():
            shutil.rmtree(snap.worktree / "dir")
            (snap.worktree / "dir").symlink_to(outside)  # swapped after the look
        return found

    monkeypatch.setattr(journal_track.worktree_paths, "present", present)
    tree = snap.track(journal=True)
    listing = snap.git("ls-tree", "-r", tree)
    blobs = [line.split()[2] for line in listing.splitlines() if line.split()[0] == "120000"]
    targets = [snap.git("cat-file", "blob", blob) for blob in blobs]
    assert "/the/servers/secret" not in targets
    assert (snap.worktree / "dir").is_symlink(), "the swap happened"
