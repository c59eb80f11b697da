"""Snapshots at repository size (issue 26): a clone's packs and index seeded into a session's
git dir, git's settings for many files (index v4, split index) with the gitlink scan still
right, and ``SNAPSHOT_EXCLUDE``."""

from __future__ import annotations

import hashlib
import os
import subprocess

import pytest

from workspace import seeding, skipped_files
from workspace.snapshots import Snapshots


def plain_git(cwd, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.invalid",
    )
    out = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)
    return out.stdout.decode()


@pytest.fixture
def clone(tmp_path):
    """A repository cloned as from a remote (its objects in a pack) into a worktree."""
    origin = tmp_path / "origin"
    (origin / "src" / "pkg").mkdir(parents=True)
    for i in range(30):
        (origin / "src" / "pkg" / f"m{i}.py").write_text(f"x = {i}\n")
    (origin / "README").write_text("hello\n")
    (origin / "run.sh").write_text("#!/bin/sh\n")
    (origin / "run.sh").chmod(0o755)
    plain_git(origin, "init", "-q", "-b", "main")
    plain_git(origin, "add", "-A")
    plain_git(origin, "commit", "-q", "-m", "one")
    plain_git(
        tmp_path, "-c", "protocol.file.allow=always", "clone", "-q", "--no-local", "origin", "wt"
    )
    return tmp_path / "wt"


def packs_of(clone):
    return sorted((clone / ".git" / "objects" / "pack").iterdir())


def loose_objects(store):
    return [p for p in store.glob("??/*") if p.is_file()]


def test_a_seeded_clone_snapshots_without_hashing_its_files(clone, tmp_path):
    store = tmp_path / "store"
    snap = Snapshots(git_dir=tmp_path / "s.git", worktree=clone, objects=store)
    seeding.seed(snap, clone / ".git" / "index", packs_of(clone))
    copied = sorted(p.name for p in (store / "pack").iterdir())
    assert copied == sorted(p.name for p in packs_of(clone))
    for pack in packs_of(clone):
        mine = store / "pack" / pack.name
        assert mine.stat().st_ino != pack.stat().st_ino and mine.stat().st_nlink == 1, "a copy"
    tree = snap.track()
    assert tree == plain_git(clone, "rev-parse", "HEAD^{tree}").strip()
    assert loose_objects(store) == [], "every object came from the clone's pack"
    # A change after the seed is a change like any other.
    (clone / "README").write_text("changed\n")
    (clone / "new.txt").write_text("new\n")
    after = snap.track()
    assert snap.patch(tree, after) == ["README", "new.txt"]


def test_seeding_twice_or_over_a_pack_already_there_is_harmless(clone, tmp_path):
    store = tmp_path / "store"
    first = Snapshots(git_dir=tmp_path / "a.git", worktree=clone, objects=store)
    seeding.seed(first, clone / ".git" / "index", packs_of(clone))
    second = Snapshots(git_dir=tmp_path / "b.git", worktree=clone, objects=store)
    seeding.seed(second, clone / ".git" / "index", packs_of(clone))
    assert first.track() == second.track()


def test_seed_takes_no_link(clone, tmp_path):
    """The worktree's .git is the agent's: a link in place of the index or of a pack is not
    followed (no file of the server copied into the store)."""
    secret = tmp_path / "secret"
    secret.write_text("server secret")
    fake = tmp_path / "fake"
    fake.mkdir()
    link = fake / ("pack-" + "a" * 40 + ".pack")
    link.symlink_to(secret)
    index = fake / "index"
    index.symlink_to(clone / ".git" / "index")
    store = tmp_path / "store"
    snap = Snapshots(git_dir=tmp_path / "s.git", worktree=clone, objects=store)
    with pytest.raises(OSError):
        seeding.seed(snap, index, [link])
    assert not (store / "pack" / link.name).exists()
    seeding.seed(snap, index, [])
    assert not (snap.git_dir / "index").exists()
    assert snap.track() == plain_git(clone, "rev-parse", "HEAD^{tree}").strip()


def _with_path_renamed(index_bytes: bytes, old: bytes, new: bytes) -> bytes:
    body = index_bytes[:-20].replace(old, new)
    return body + hashlib.sha1(body).digest()


def test_an_index_with_a_path_git_refuses_is_not_seeded(clone, tmp_path):
    blob = plain_git(clone, "hash-object", "-w", "README").strip()
    env_index = tmp_path / "crafted-index"
    subprocess.run(
        ["git", "update-index", "--add", "--cacheinfo", f"100644,{blob},zz/evil"],
        cwd=clone,
        env={**os.environ, "GIT_INDEX_FILE": str(env_index)},
        check=True,
    )
    env_index.write_bytes(_with_path_renamed(env_index.read_bytes(), b"zz/evil", b"../evil"))
    snap = Snapshots(git_dir=tmp_path / "s.git", worktree=clone, objects=tmp_path / "store")
    seeding.seed(snap, env_index, [])
    assert not (snap.git_dir / "index").exists(), "refused: the next track hashes every file"
    tree = snap.track()
    assert tree == plain_git(clone, "rev-parse", "HEAD^{tree}").strip()
    assert not (tmp_path / "evil").exists()


def test_seed_leaves_the_excluded_paths_out(clone, tmp_path, settings):
    settings.SNAPSHOT_EXCLUDE = ["node_modules/"]
    origin = tmp_path / "origin"
    (origin / "node_modules" / "dep").mkdir(parents=True)
    (origin / "node_modules" / "dep" / "index.js").write_text("x")
    plain_git(origin, "add", "-A")
    plain_git(origin, "commit", "-q", "-m", "two")
    plain_git(clone, "pull", "-q", "--ff-only")
    snap = Snapshots(git_dir=tmp_path / "s.git", worktree=clone, objects=tmp_path / "store")
    seeding.seed(snap, clone / ".git" / "index", packs_of(clone))
    names = snap._all_files(snap.track())
    assert "README" in names and not [n for n in names if n.startswith("node_modules/")]


def test_the_index_is_version_4_and_split(tmp_path):
    wt = tmp_path / "wt"
    wt.mkdir()
    for i in range(500):
        path = wt / f"a-file-with-a-long-name-{i:04d}.txt"
        path.write_text(str(i))
        # Older than the index: none "racily clean" (re-checked, then rewritten in the small
        # part by the next write).
        os.utime(path, (path.stat().st_mtime - 10, path.stat().st_mtime - 10))
    snap = Snapshots(git_dir=tmp_path / "s.git", worktree=wt)
    snap.track()
    shared = list(snap.git_dir.glob("sharedindex.*"))
    assert len(shared) == 1
    assert shared[0].read_bytes()[:8] == b"DIRC\x00\x00\x00\x04"
    (wt / "a-file-with-a-long-name-0003.txt").write_text("changed")
    snap.track()
    assert list(snap.git_dir.glob("sharedindex.*")) == shared, "a step rewrites the small part"
    assert snap.git_dir.joinpath("index").stat().st_size * 4 < shared[0].stat().st_size


def test_a_gitlink_in_the_shared_part_of_the_index_is_still_taken_apart(tmp_path):
    wt = tmp_path / "wt"
    (wt / "sub").mkdir(parents=True)
    (wt / "sub" / "s.txt").write_text("nested file")
    (wt / "a.txt").write_text("a")
    snap = Snapshots(git_dir=tmp_path / "s.git", worktree=wt)
    snap.track()
    head = "1" * 40
    snap.check(["update-index", "--force-remove", "--", "sub/s.txt"])
    snap.check(["update-index", "--add", "--cacheinfo", f"160000,{head},sub"])
    # Into the shared part: a new shared index written with the gitlink in it.
    snap.check(["-c", "splitIndex.maxPercentChange=0", "update-index", "--split-index"])
    assert b"\x00\x00\xe0\x00" not in (snap.git_dir / "index").read_bytes()
    tree = snap.track()
    assert "160000" not in snap.git("ls-files", "--stage")
    assert "sub/s.txt" in snap._all_files(tree)


def test_excluded_paths_stay_out_and_are_reported(tmp_path, settings):
    settings.SNAPSHOT_EXCLUDE = ["node_modules/", "*.cache"]
    wt = tmp_path / "wt"
    (wt / "node_modules" / "dep").mkdir(parents=True)
    (wt / "node_modules" / "dep" / "index.js").write_text("x")
    (wt / "build").mkdir()
    (wt / "build" / "out.o").write_text("o")
    (wt / "x.cache").write_text("c")
    (wt / ".gitignore").write_text("build/\n")
    (wt / "a.txt").write_text("a")
    snap = Snapshots(git_dir=tmp_path / "s.git", worktree=wt)
    names = snap._all_files(snap.track())
    assert names == [".gitignore", "a.txt"]
    assert skipped_files.skipped(snap) == [
        {"path": "build/", "reason": "ignored"},
        {"path": "node_modules/", "reason": "excluded"},
        {"path": "x.cache", "reason": "excluded"},
    ]
    # The setting changed: info/exclude follows it.
    settings.SNAPSHOT_EXCLUDE = []
    assert "node_modules/dep/index.js" in snap._all_files(snap.track())
    assert skipped_files.skipped(snap) == [{"path": "build/", "reason": "ignored"}]


def test_the_first_snapshot_finds_large_files_from_blob_sizes(tmp_path, settings):
    settings.SNAPSHOT_MAX_FILE_BYTES = 100
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "big.dat").write_bytes(b"x" * 1000)
    (wt / "small.txt").write_text("ok")
    (wt / "link").symlink_to("big.dat")
    snap = Snapshots(git_dir=tmp_path / "s.git", worktree=wt)
    assert sorted(snap._all_files(snap.track())) == ["link", "small.txt"]


def test_an_index_naming_objects_the_store_lacks_is_not_seeded(clone, tmp_path):
    """Packs not given (or a shallow clone's missing objects): a seeded index would give trees
    naming blobs nobody stored; it is refused and the first snapshot hashes every file."""
    store = tmp_path / "store"
    snap = Snapshots(git_dir=tmp_path / "s.git", worktree=clone, objects=store)
    seeding.seed(snap, clone / ".git" / "index", [])
    assert not (snap.git_dir / "index").exists()
    tree = snap.track()
    assert tree == plain_git(clone, "rev-parse", "HEAD^{tree}").strip()
    assert snap.read_blob(tree, "README") == b"hello\n"


def test_seed_leaves_large_files_out(clone, tmp_path, settings):
    settings.SNAPSHOT_MAX_FILE_BYTES = 6
    snap = Snapshots(git_dir=tmp_path / "s.git", worktree=clone, objects=tmp_path / "store")
    seeding.seed(snap, clone / ".git" / "index", packs_of(clone))
    names = snap._all_files(snap.track())
    assert "README" in names and "src/pkg/m1.py" in names  # 6 bytes each
    assert "run.sh" not in names and "src/pkg/m10.py" not in names  # 10 and 7 bytes
    assert {"path": "run.sh", "reason": "large"} in skipped_files.skipped(snap)
