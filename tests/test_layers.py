"""Issue 43: a command's layer merged into its worktree by renames, and what a hostile layer
may hold (``workspace/layers.py``). The layers here are made by hand, as a command could have
left them (and as it could not: a device, an overlay attribute set from outside)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from workspace import layers


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    root = tmp_path / "ws" / "ses_x"
    root.mkdir(parents=True)
    (root / "keep.txt").write_text("keep\n")
    (root / "gone.txt").write_text("gone\n")
    (root / "dir").mkdir()
    (root / "dir" / "old.txt").write_text("old\n")
    (root / "dir" / "stays.txt").write_text("stays\n")
    (root / "replaced").mkdir()
    (root / "replaced" / "hidden.txt").write_text("hidden\n")
    return root


def _whiteout(path: Path) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(0, 0))
    except PermissionError:
        pytest.skip("making a whiteout needs CAP_MKNOD here")


def _opaque(path: Path) -> None:
    os.setxattr(path, "user.overlay.opaque", b"y")


def test_a_layer_is_merged_by_renames_and_never_writes_into_a_file(worktree):
    keep_inode = (worktree / "keep.txt").stat().st_ino
    link = worktree.parent / "other-fork-keep.txt"
    os.link(worktree / "keep.txt", link)  # another worktree shares it
    layer = layers.Layer.create(worktree)
    (layer.upper / "keep.txt").write_text("changed\n")
    _whiteout(layer.upper / "gone.txt")
    (layer.upper / "dir").mkdir()
    (layer.upper / "dir" / "new.txt").write_text("new\n")
    _whiteout(layer.upper / "dir" / "old.txt")
    (layer.upper / "replaced").mkdir()
    _opaque(layer.upper / "replaced")
    (layer.upper / "replaced" / "only.txt").write_text("only\n")
    (layer.upper / "fresh" / "deep").mkdir(parents=True)
    (layer.upper / "fresh" / "deep" / "f.txt").write_text("f\n")
    merged = layer.merge()
    assert (worktree / "keep.txt").read_text() == "changed\n"
    assert (worktree / "keep.txt").stat().st_ino != keep_inode
    assert link.read_text() == "keep\n", "the shared file is untouched"
    assert not (worktree / "gone.txt").exists()
    assert sorted(p.name for p in (worktree / "dir").iterdir()) == ["new.txt", "stays.txt"]
    assert [p.name for p in (worktree / "replaced").iterdir()] == ["only.txt"]
    assert (worktree / "fresh" / "deep" / "f.txt").read_text() == "f\n"
    assert os.listxattr(worktree / "replaced") == [], "no overlay attribute is kept"
    assert "fresh/deep/f.txt" in merged.changed and "gone.txt" in merged.changed
    assert not layer.root.exists()


def test_a_hostile_layer_is_neutralised_and_nothing_in_it_is_followed(worktree, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("server secret\n")
    layer = layers.Layer.create(worktree)
    os.mkfifo(layer.upper / "fifo")
    listener = socket.socket(socket.AF_UNIX)
    directory = os.open(layer.upper, os.O_RDONLY | os.O_DIRECTORY)
    try:
        listener.bind(f"/proc/self/fd/{directory}/sock")
    finally:
        listener.close()
        os.close(directory)
    os.link(secret, layer.upper / "hardlink-out")  # a hard link to a file outside
    os.symlink("/etc/passwd", layer.upper / "symlink-out")
    (layer.upper / "redirected").mkdir()
    os.setxattr(layer.upper / "redirected", "user.overlay.redirect", b"/keep.txt")
    (layer.upper / "meta.txt").write_text("")
    os.setxattr(layer.upper / "meta.txt", "user.overlay.metacopy", b"")
    (layer.upper / "dir").mkdir()
    os.mkfifo(layer.upper / "dir" / "fifo-in-dir")
    try:
        os.mknod(layer.upper / "device", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        device = True
    except PermissionError:
        device = False
    merged = layer.merge()
    expected = {"fifo", "sock", "hardlink-out", "redirected", "meta.txt", "dir/fifo-in-dir"}
    assert expected | ({"device"} if device else set()) == set(merged.removed), merged
    for name in expected | {"device"}:
        assert not os.path.lexists(worktree / name), name
    assert os.readlink(worktree / "symlink-out") == "/etc/passwd", "kept as a link, never read"
    assert secret.read_text() == "server secret\n" and secret.stat().st_nlink == 1
    assert (worktree / "keep.txt").read_text() == "keep\n"


def test_a_merge_a_crash_interrupted_is_finished_by_the_next_command(worktree):
    layer = layers.Layer.create(worktree)
    (layer.upper / "a.txt").write_text("a\n")
    (layer.upper / "b.txt").write_text("b\n")
    (layer.root / layers.MERGING).touch()
    os.rename(layer.upper / "a.txt", worktree / "a.txt")  # the first rename, then a crash
    abandoned = layers.Layer.create(worktree)  # settles the first one
    assert (worktree / "b.txt").read_text() == "b\n" and (worktree / "a.txt").exists()
    assert not layer.root.exists()
    (abandoned.upper / "never.txt").write_text("its command never ended\n")
    layers.settle(worktree)
    assert not (worktree / "never.txt").exists() and not abandoned.root.exists()


def test_usage_counts_what_a_layer_adds_over_what_it_replaces(worktree):
    layer = layers.Layer.create(worktree)
    (layer.upper / "keep.txt").write_text("changed and longer\n")  # 5 → 19 bytes
    (layer.upper / "new.txt").write_text("12345")
    os.link(layer.upper / "new.txt", layer.upper / "new-link.txt")
    _whiteout(layer.upper / "gone.txt")
    used = layer.usage()
    assert used.bytes == (19 - 5) + 5 + 5 - 5
    assert used.entries == 2 - 1
    layer.drop()
