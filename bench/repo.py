"""Snapshots at repository size (issue 26, "Size"), side by side with plain git on the same
tree in the same run.

Two trees:

* **a real project**: the source distribution of a large project from the package index
  (``pip download --no-deps --no-binary :all: Django==5.1.4``: 6,809 files), downloaded once
  and kept in ``bench/results/sdist/`` (not in the repository);
* **a generated tree**: 50,000 files of 10,000 bytes each, 500 MB (``--quick``: 5,000 files,
  50 MB), in 20 top directories of 50 directories of 50 files; the bytes do not compress.

Each is committed with plain git into an "origin" repository and cloned from it with plain git
(``--no-local``: the objects arrive as a pack, as from a remote) into a worktree. Then:

* **seed, then the first snapshot**: ``Snapshots.seed`` copies the clone's packs into the
  shared store and its index into the session's git dir; the first ``track()`` after it,
  against ``git status`` in the clone (the floor). Beside it, the first ``track()`` of the
  same worktree with nothing seeded (every file hashed).
* **a step's snapshot**: 100 steps, each changing one file (its last 100 bytes), each a
  ``track()``: p50 and p99, against ``git status`` and plain ``git add -A && git write-tree``
  in the clone after the same change. The store's growth over the 100 steps (``du`` of the
  shared store) against the bytes of the files changed.
* **revert / unrevert of 10 files**: ``compose`` + ``checkout`` (what ``revert_session`` does
  to the files) and ``checkout`` back (unrevert), against the same in a 100-file worktree;
  ``restore`` (which first takes a snapshot: a stat walk of the whole worktree) beside.
* **fork**: the fork's worktree made from the tree (``materialize``, what a fork does today):
  its time and the disk it adds, against the worktree's size.
* **memory**: this process's RSS before and after each phase and its peak; the largest git
  process's peak (``RUSAGE_CHILDREN``).
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from .stats import percentile, ratio

HERE = Path(__file__).resolve().parent
CACHE = HERE / "results" / "sdist"
PROJECT = ("Django", "5.1.4")
STEPS = 100


# -- plain git, as a user runs it -------------------------------------------------------------
def _plain_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="bench",
        GIT_AUTHOR_EMAIL="bench@example.invalid",
        GIT_COMMITTER_NAME="bench",
        GIT_COMMITTER_EMAIL="bench@example.invalid",
        LC_ALL="C",
    )
    return env


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, env=_plain_env(), check=True, capture_output=True)
    return out.stdout.decode("utf-8", "replace")


def _ms(fn) -> float:  # noqa: ANN001
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000.0


def _median_ms(fn, repeat: int) -> float:  # noqa: ANN001
    return statistics.median(_ms(fn) for _ in range(repeat))


def du(path: Path) -> int:
    """Bytes on disk under ``path`` (blocks, as ``du`` counts them), links not followed."""
    total = 0
    stack = [str(path)]
    while stack:
        for entry in os.scandir(stack.pop()):
            st = entry.stat(follow_symlinks=False)
            total += st.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return total


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def peak_mib(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024.0


# -- the trees -----------------------------------------------------------------------------------
def fetch_sdist() -> Path:
    """The project's sdist, downloaded once with pip (the configured index) into the cache."""
    name, version = PROJECT
    CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE.glob(f"{name}-{version}.tar.gz")) or sorted(
        CACHE.glob(f"{name.lower()}-{version}.tar.gz")
    )
    if not found:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"{name}=={version}",
                "-d",
                str(CACHE),
            ],
            check=True,
        )
        found = sorted(CACHE.glob(f"{name}-{version}.tar.gz")) or sorted(
            CACHE.glob(f"{name.lower()}-{version}.tar.gz")
        )
    return found[0]


def unpack(archive: Path, into: Path) -> None:
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    (top,) = list(into.iterdir())  # Django-5.1.4/
    for child in top.iterdir():
        child.rename(into / child.name)
    top.rmdir()


def generate(root: Path, files: int, size: int = 10_000) -> list[str]:
    """``files`` files of ``size`` bytes that do not compress: 20 x 50 directories of 50."""
    block = os.urandom(1 << 17)
    names = []
    for i in range(files):
        rel = f"p{i // 2500:02d}/d{(i // 50) % 50:02d}/f{i:05d}.bin"
        path = root / rel
        if i % 50 == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
        offset = (i * 7919) % (len(block) - size)
        path.write_bytes(b"%d\n" % i + block[offset : offset + size - 8])
        names.append(rel)
    return names


def clone_of(tree: Path, where: Path) -> Path:
    """``tree`` committed into an origin repository, then cloned with plain git (as from a
    remote: the objects arrive in a pack) to ``where``."""
    origin = where / "origin"
    origin.mkdir(parents=True)
    for child in tree.iterdir():
        child.rename(origin / child.name)
    git(origin, "init", "-q", "-b", "main")
    git(origin, "config", "pack.window", "0")  # a quick pack (bytes that do not delta anyway)
    git(origin, "config", "gc.auto", "0")  # no repack of the loose objects after the commit
    git(origin, "add", "-A")
    git(origin, "commit", "-q", "-m", "import")
    clone = where / "clone"
    git(where, "-c", "protocol.file.allow=always", "clone", "-q", "--no-local", "origin", "clone")
    shutil.rmtree(origin)
    return clone


# -- the measures --------------------------------------------------------------------------------
def measure_seed(label: str, clone: Path, work: Path, repeat: int) -> dict[str, Any]:
    from workspace import seeding
    from workspace.snapshots import Snapshots

    files = int(git(clone, "ls-files", "-z").count("\0"))
    git(clone, "status", "--porcelain")  # warm
    status_ms = _median_ms(lambda: git(clone, "status", "--porcelain"), repeat)
    store = work / f"{label}-store"
    snap = Snapshots(git_dir=work / f"{label}.git", worktree=clone, objects=store)
    packs = sorted((clone / ".git" / "objects" / "pack").iterdir())
    seed_ms = _ms(lambda: seeding.seed(snap, clone / ".git" / "index", packs))
    first_ms = _ms(snap.track)
    second_ms = _ms(snap.track)
    assert snap.track() == git(clone, "rev-parse", "HEAD^{tree}").strip(), "seeded tree differs"
    cold = Snapshots(git_dir=work / f"{label}-cold.git", worktree=clone, objects=store)
    unseeded_ms = _ms(cold.track)
    return {
        "label": label,
        "files": files,
        "bytes": sum(
            (clone / n).stat().st_size for n in git(clone, "ls-files", "-z").split("\0") if n
        ),
        "git_status_ms": status_ms,
        "seed_ms": seed_ms,
        "pack_bytes": sum(p.stat().st_size for p in packs),
        "first_track_ms": first_ms,
        "second_track_ms": second_ms,
        "unseeded_first_track_ms": unseeded_ms,
        "ratio_first_vs_status": ratio(first_ms, status_ms),
        "snap": snap,
    }


def measure_steps(clone: Path, snap, names: list[str], steps: int) -> dict[str, Any]:  # noqa: ANN001
    store = snap.objects
    before = du(store)
    rss_start = rss_mib()
    rss_before = rss_start
    times, changed_bytes = [], 0
    for i in range(steps):
        path = clone / names[(i * 37) % len(names)]
        body = path.read_bytes()
        path.write_bytes(body[:-100] + os.urandom(100))
        changed_bytes += len(body)
        times.append(_ms(snap.track))
        if i == 9:
            rss_before = rss_mib()  # after the first ten: what a worker that ran steps holds
    growth = du(store) - before
    # Plain git on the same tree after the same kind of change.
    plain_status, plain_add = [], []
    for i in range(min(steps, 20)):
        path = clone / names[(i * 41) % len(names)]
        path.write_bytes(path.read_bytes()[:-100] + os.urandom(100))
        plain_status.append(_ms(lambda: git(clone, "status", "--porcelain")))
        plain_add.append(_ms(lambda: (git(clone, "add", "-A"), git(clone, "write-tree"))))
    snap.track()
    return {
        "steps": steps,
        "p50_ms": percentile(times, 50),
        "p99_ms": percentile(times, 99),
        "max_ms": max(times),
        "git_status_p50_ms": percentile(plain_status, 50),
        "git_add_write_tree_p50_ms": percentile(plain_add, 50),
        "store_growth_bytes": growth,
        "changed_bytes": changed_bytes,
        "growth_per_changed_byte": ratio(growth, changed_bytes),
        "rss_start_mib": rss_start,
        "rss_before_mib": rss_before,
        "rss_after_mib": rss_mib(),
    }


def measure_journal_steps(clone: Path, snap, names: list[str], steps: int) -> dict[str, Any]:  # noqa: ANN001
    """Issue 43: a step that changes 10 files, by the file tools (``replace_file``) and by a
    shell command (its layer merged), then the step's snapshot from the journal
    (``track(journal=True)``); beside it, the walk of the whole worktree after the same kind
    of change (``track()``, every step's snapshot before)."""
    import asyncio

    from django.test import override_settings

    from workspace import sandbox, worktree_files

    async def quiet(text: str) -> None:
        return None

    def tools(i: int) -> None:
        for k in range(10):
            name = names[(i * 37 + k * 4999) % len(names)]
            data = os.urandom(100)
            worktree_files.replace_file(clone, tuple(name.split("/")), data, append=False)

    def shell(i: int) -> None:
        paths = " ".join(names[(i * 41 + k * 4999) % len(names)] for k in range(10))
        command = f"for f in {paths}; do head -c 100 /dev/urandom > $f; done"
        run = sandbox.run(clone, command, on_output=quiet, should_stop=lambda: False)
        assert asyncio.run(run).exit_code == 0

    out: dict[str, Any] = {}
    with override_settings(AGENT_ALLOW_SHELL=True, AGENT_SHELL_SANDBOX="bwrap"):
        layered = not sandbox.unavailable_reason() and sandbox.uses_layers(clone)
        snap.track()  # the walk that makes the journal trusted
        for label, write in (("tools", tools), ("shell", shell)):
            if label == "shell" and not layered:
                continue
            journal, walk, floor = [], [], []
            for i in range(steps):
                write(i)
                before = _loose(snap)
                journal.append(_ms(lambda: snap.track(journal=True)))
                made = _loose(snap) - before
                floor.append(_ms(lambda n=made: _write_objects(snap, n)))
            for i in range(min(steps, 20)):
                write(steps + i)
                walk.append(_ms(snap.track))
            out[label] = {
                "p50_ms": percentile(journal, 50),
                "p99_ms": percentile(journal, 99),
                "walk_p50_ms": percentile(walk, 50),
                "floor_p50_ms": percentile(floor, 50),
            }
    out["layered"] = layered
    return out


def _loose(snap) -> int:  # noqa: ANN001
    """Loose objects in the store now."""
    root = snap.objects or snap.git_dir / "objects"
    return sum(len(os.listdir(root / d)) for d in os.listdir(root) if len(d) == 2)


def _write_objects(snap, count: int) -> None:  # noqa: ANN001
    """The floor of a step's snapshot: ``count`` new loose objects written as the store
    writes one (``tree_objects.write_object``: compressed, a new file renamed), nothing
    else."""
    from workspace.tree_objects import write_object

    for _ in range(count):
        write_object(snap, "blob", os.urandom(200))


def measure_revert(clone: Path, snap, names: list[str], repeat: int) -> dict[str, Any]:  # noqa: ANN001
    """10 files changed by a step (the write tool's writer), then reverted and unreverted:
    the work on the files that ``revert_session`` / ``unrevert_session`` do, their snapshot
    of the worktree as it is included (from the journal, issue 43; the database part is the
    checkpoint benchmark's)."""
    from workspace import trees, worktree_files

    changed = [names[(i * len(names)) // 10] for i in range(10)]
    revert, unrevert, restore = [], [], []
    snap.track()  # the walk that makes the journal trusted
    for _ in range(repeat):
        before = snap.track(journal=True)
        for name in changed:
            parts = tuple(name.split("/"))
            worktree_files.replace_file(clone, parts, b"changed\n", append=True)
        after = snap.track(journal=True)

        start = time.perf_counter()
        current = snap.peek(journal=True)  # revert_plan.make_plan: the files as they are
        target = trees.compose(snap, current, dict.fromkeys(changed, before))
        snap.checkout(target, snap.patch(current, target))
        revert.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        snap.restore(after, journal=True)  # unrevert_session: the pre-revert tree back
        unrevert.append((time.perf_counter() - start) * 1000)
        restore.append(_ms(lambda t=target: snap.restore(t)))  # the same by a walk
        snap.restore(after, journal=True)
        assert snap.track() == after
    return {
        "files": len(names),
        "revert_ms": statistics.median(revert),
        "unrevert_ms": statistics.median(unrevert),
        "restore_ms": statistics.median(restore),
    }


def du_new(paths: list[Path], known: set[tuple[int, int]] | None = None) -> int:
    """Bytes on disk under ``paths`` that no inode of ``known`` holds (each inode counted
    once: a file shared by hard link costs its blocks once), links not followed."""
    seen = set(known or ())
    total = 0
    stack = [str(p) for p in paths]
    while stack:
        for entry in os.scandir(stack.pop()):
            st = entry.stat(follow_symlinks=False)
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return total


def _inodes(path: Path) -> set[tuple[int, int]]:
    found = set()
    stack = [str(path)]
    while stack:
        for entry in os.scandir(stack.pop()):
            st = entry.stat(follow_symlinks=False)
            found.add((st.st_dev, st.st_ino))
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return found


def measure_fork(clone: Path, snap, work: Path) -> dict[str, Any]:  # noqa: ANN001
    """A fork's worktree two ways in the same run: its files checked out from the tree (a full
    copy, what a fork does where no overlay can be mounted) and hard links to the source's
    files (``linked_fork``, issue 43); each one's time and the disk it adds (the source's
    inodes not counted again)."""
    from workspace import linked_fork
    from workspace.snapshots import Snapshots

    tree = snap.track()
    source = du(clone) - du(clone / ".git")
    known = _inodes(clone) | _inodes(snap.git_dir)  # the source session: its files, its git dir
    out: dict[str, Any] = {"worktree_bytes": source}
    for way in ("copy", "links"):
        fork = Snapshots(git_dir=work / "fork.git", worktree=work / "fork-wt", objects=snap.objects)
        start = time.perf_counter()
        if way == "copy":
            fork.materialize(tree)
        else:
            linked_fork.materialize(fork, tree, snap)
        out[f"{way}_ms"] = (time.perf_counter() - start) * 1000
        out[f"{way}_first_track_ms"] = _ms(fork.track)
        added = du_new([work / "fork-wt", work / "fork.git"], known)
        out[f"{way}_added_bytes"] = added
        out[f"{way}_added_share"] = ratio(added, source)
        shutil.rmtree(work / "fork-wt")
        shutil.rmtree(work / "fork.git")
    return out


def measure_many_forks(clone: Path, snap, work: Path, count: int) -> dict[str, Any]:  # noqa: ANN001
    """``count`` forks of one session by links (a team forking one shared session): the disk
    all of them add against the session's, and the floor no fork of directories of its own
    can go under (each fork's directories, 4 KiB blocks each)."""
    from workspace import linked_fork
    from workspace.snapshots import Snapshots

    tree = snap.track()
    session = du(clone) - du(clone / ".git")
    known = _inodes(clone) | _inodes(snap.git_dir)  # the source session: its files, its git dir
    dirs = sum(1 for p in clone.rglob("*") if p.is_dir() and ".git" not in p.parts) + 1
    made, start = [], time.perf_counter()
    for i in range(count):
        fork = Snapshots(
            git_dir=work / f"many-{i}.git", worktree=work / f"many-{i}", objects=snap.objects
        )
        linked_fork.materialize(fork, tree, snap)
        made += [fork.worktree, fork.git_dir]
    seconds = time.perf_counter() - start
    added = du_new(made, known)
    for path in made:
        shutil.rmtree(path)
    return {
        "forks": count,
        "session_bytes": session,
        "added_bytes": added,
        "total_vs_one": ratio(session + added, session),
        "floor_bytes": count * dirs * 4096,
        "per_fork_ms": seconds * 1000 / count,
    }


def run(quick: bool = False) -> dict[str, Any]:
    import django

    django.setup()
    from workspace.snapshots import Snapshots

    files = 5_000 if quick else 50_000
    repeat = 3 if quick else 5
    out: dict[str, Any] = {"quick": quick, "phases": []}
    rss0 = rss_mib()
    with tempfile.TemporaryDirectory(prefix="bench-repo-") as tmp:
        work = Path(tmp)

        def phase(name: str) -> None:
            out["phases"].append({"phase": name, "rss_mib": rss_mib(), "peak_mib": peak_mib()})

        # (a) the real project
        src = work / "project-src"
        src.mkdir()
        unpack(fetch_sdist(), src)
        project = clone_of(src, work / "project")
        out["project"] = measure_seed(f"{PROJECT[0]}-{PROJECT[1]}", project, work, repeat)
        out["project"].pop("snap")
        phase("project seeded and snapshotted")
        shutil.rmtree(work / "project")

        # (b) the generated tree
        gen = work / "gen-src"
        gen.mkdir()
        names = generate(gen, files)
        clone = clone_of(gen, work / "gen")
        seeded = measure_seed(f"generated-{files}", clone, work, repeat)
        snap = seeded.pop("snap")
        out["generated"] = seeded
        phase("generated tree seeded and snapshotted")
        out["steps"] = measure_steps(clone, snap, names, STEPS)
        phase(f"{STEPS} steps")
        out["journal_steps"] = measure_journal_steps(clone, snap, names, STEPS)
        phase(f"{STEPS} steps of 10 files, from the journal")
        out["revert_large"] = measure_revert(clone, snap, names, repeat)
        phase("revert/unrevert")
        small_tree = work / "small"
        small_names = generate(small_tree, 100)
        small = Snapshots(git_dir=work / "small.git", worktree=small_tree, objects=snap.objects)
        small.track()
        out["revert_small"] = measure_revert(small_tree, small, small_names, repeat)
        out["fork"] = measure_fork(clone, snap, work)
        phase("fork")
        out["many_forks"] = measure_many_forks(clone, snap, work, 10 if quick else 100)
        phase("many forks")
    out["rss_start_mib"] = rss0
    out["rss_end_mib"] = rss_mib()
    out["peak_mib"] = peak_mib()
    out["git_peak_mib"] = peak_mib(resource.RUSAGE_CHILDREN)
    return out


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def report(r: dict[str, Any]) -> str:
    from .__main__ import _f, _table

    rows = []
    for key in ("project", "generated"):
        s = r[key]
        rows.append(
            [
                f"{s['label']} ({s['files']:,} files, {s['bytes'] / 2**20:,.0f} MiB)",
                _f(s["git_status_ms"]),
                f"{_f(s['seed_ms'])} ({s['pack_bytes'] / 2**20:,.0f} MiB of packs)",
                _f(s["first_track_ms"]),
                f"{_f(s['ratio_first_vs_status'], 2)}x",
                _f(s["unseeded_first_track_ms"]),
                _verdict(s["ratio_first_vs_status"] <= 2.0),
            ]
        )
    t1 = _table(
        "First snapshot after a clone: seed (the clone's packs and index) then track(), vs "
        "`git status` in the clone",
        [
            "",
            "git status ms",
            "seed ms",
            "first track ms",
            "ratio",
            "not seeded ms",
            "<= 2x",
        ],
        rows,
        "not seeded: the first track() of the same worktree with an empty index (every file "
        "hashed), the cost before seed()",
    )
    st, gen = r["steps"], r["generated"]
    t2 = _table(
        f"A step's snapshot at {gen['files']:,} files ({st['steps']} steps, one file changed each)",
        ["", "p50 ms", "p99 ms", "target", ""],
        [
            [
                "track()",
                _f(st["p50_ms"]),
                _f(st["p99_ms"]),
                "p50 <= 100, p99 <= 300",
                _verdict(st["p50_ms"] <= 100 and st["p99_ms"] <= 300),
            ],
            ["plain git status (same tree)", _f(st["git_status_p50_ms"]), "-", "", ""],
            [
                "plain git add -A && git write-tree",
                _f(st["git_add_write_tree_p50_ms"]),
                "-",
                "",
                "",
            ],
        ],
        f"track() / git status: {_f(ratio(st['p50_ms'], st['git_status_p50_ms']), 2)}x; "
        f"/ git add+write-tree: {_f(ratio(st['p50_ms'], st['git_add_write_tree_p50_ms']), 2)}x",
    )
    growth_ok = st["growth_per_changed_byte"] <= 5.0
    t3 = (
        f"Store growth over {st['steps']} steps: {st['store_growth_bytes'] / 1024:,.0f} KiB for "
        f"{st['changed_bytes'] / 1024:,.0f} KiB of changed files "
        f"({_f(st['growth_per_changed_byte'], 2)}x: new blobs, the trees on their paths, 4 KiB "
        f"blocks; the tree is {gen['bytes'] / 2**20:,.0f} MiB) -- "
        f"{_verdict(growth_ok)} (target: about the changed bytes, <= 5x)"
    )
    a, b = r["revert_small"], r["revert_large"]
    rev_rows = [
        [
            what,
            _f(a[key]),
            _f(b[key]),
            f"{_f(ratio(b[key], a[key]), 2)}x",
            _verdict(ratio(b[key], a[key]) <= 1.5) if target else "(info)",
        ]
        for what, key, target in (
            ("revert (snapshot from the journal + compose + checkout)", "revert_ms", True),
            ("unrevert (snapshot from the journal + checkout back)", "unrevert_ms", True),
            ("restore() by a walk (track's stat walk + checkout)", "restore_ms", False),
        )
    ]
    t4 = _table(
        "Revert / unrevert of 10 files (median ms)",
        ["", f"{a['files']:,} files", f"{b['files']:,} files", "ratio", "<= 1.5x"],
        rev_rows,
    )
    f = r["fork"]
    fork_rows = []
    for way, label in (("links", "hard links (issue 43)"), ("copy", "full copy (no overlay)")):
        fork_rows.append(
            [
                f"fork ms, {label}",
                _f(f[f"{way}_ms"]),
                "<= 1000" if way == "links" else "",
                _verdict(f[f"{way}_ms"] <= 1000) if way == "links" else "",
            ]
        )
        fork_rows.append(
            [f"the fork's first track() ms, {label}", _f(f[f"{way}_first_track_ms"]), "", ""]
        )
        fork_rows.append(
            [
                f"disk added MiB, {label}",
                f"{f[f'{way}_added_bytes'] / 2**20:,.1f} of {f['worktree_bytes'] / 2**20:,.0f} "
                f"({_f(100 * f[f'{way}_added_share'], 1)}%)",
                "<= 5%" if way == "links" else "",
                _verdict(f[f"{way}_added_share"] <= 0.05) if way == "links" else "",
            ]
        )
    fork_rows.append(
        ["links / copy, time", f"{_f(ratio(f['links_ms'], f['copy_ms']), 3)}x", "", ""]
    )
    m = r["many_forks"]
    fork_rows.append(
        [
            f"{m['forks']} forks by links: the disk of all with the session, vs the session's",
            f"{_f(m['total_vs_one'], 2)}x ({m['added_bytes'] / 2**20:,.0f} MiB added, "
            f"{_f(m['per_fork_ms'], 0)} ms a fork)",
            "<= 1.1x",
            _verdict(m["total_vs_one"] <= 1.1),
        ]
    )
    t5 = _table(
        "Fork of the generated worktree, both ways in one run",
        ["", "value", "target", ""],
        fork_rows,
        f"the floor of {m['forks']} forks of directories of their own: their directories' "
        f"4 KiB blocks, {m['floor_bytes'] / 2**20:,.0f} MiB "
        f"({_f(ratio(m['session_bytes'] + m['floor_bytes'], m['session_bytes']), 2)}x)",
    )
    phases = "; ".join(f"{p['phase']}: {_f(p['rss_mib'], 0)}" for p in r["phases"])
    t6 = (
        f"Memory (this process, RSS MiB): start {_f(r['rss_start_mib'], 0)}; {phases}; "
        f"steps: before {_f(st['rss_start_mib'], 1)}, after 10 {_f(st['rss_before_mib'], 1)}, "
        f"after {st['steps']} {_f(st['rss_after_mib'], 1)}; peak {_f(r['peak_mib'], 0)}; the "
        f"largest child process's peak {_f(r['git_peak_mib'], 0)} (the bench's own plain git "
        f"clone among them) -- {_verdict(st['rss_after_mib'] - st['rss_before_mib'] <= 2)} "
        "(flat from step 10 to the last: within 2 MiB)"
    )
    return "\n\n".join([t1, t2, _journal_table(r), t3, t4, t5, t6])


def _journal_table(r: dict[str, Any]) -> str:
    from .__main__ import _f, _table

    js, gen = r["journal_steps"], r["generated"]
    rows = []
    for label, what in (("tools", "the file tools"), ("shell", "a shell command (its layer)")):
        if label not in js:
            rows.append([what, "-", "-", "-", "-", "no overlay here", ""])
            continue
        m = js[label]
        ok = m["p50_ms"] <= 20 and m["p99_ms"] <= 50
        rows.append(
            [what, _f(m["p50_ms"]), _f(m["p99_ms"]), _f(m["walk_p50_ms"]),
             _f(m["floor_p50_ms"]), "p50 <= 20, p99 <= 50", _verdict(ok)]
        )  # fmt: skip
    return _table(
        f"A step that changes 10 files at {gen['files']:,} files: its snapshot from the "
        "journal (issue 43)",
        ["written by", "p50 ms", "p99 ms", "walk p50 ms", "floor p50 ms", "target", ""],
        rows,
        "walk: the same step's snapshot by a walk of the whole worktree (every step's before "
        "issue 43; the verifier's now); floor: the same number of new objects (the blobs "
        "and the trees on their paths) written into the store and nothing else",
    )
