"""Copy-on-write for the shell (issue 43): a command writes into a layer, never into the
worktree.

Each command runs over an overlay mounted in a user and mount namespace of its own
(``unshare``, util-linux; kernel overlayfs with ``userxattr``, which mounts there as an
unprivileged user): the lower layer is the worktree, read-only to the kernel's overlay; the
upper layer is the command's own directory beside the worktrees
(``WORKSPACE_ROOT/.layers/<session>-<id>``, the same filesystem). bubblewrap then binds the
overlay, not the worktree, at ``/workspace``. When the command ends, its upper layer is its
exact change set: new and changed files (a changed file is a whole new copy), whiteouts (a
character device 0/0) for deletions, opaque directories (``user.overlay.opaque``) for a
directory replaced whole.

* **Limits** are measured on the layer (``usage``): what it adds over the files it replaces,
  hard links counted by name. A command past them, stopped, timed out or killed for memory is
  undone by dropping the layer: nothing was written to the worktree.
* **The merge** moves the layer into the worktree by renames (a file over a file; a new
  directory whole), unlinks for whiteouts: never a write into an existing file, so a file a
  worktree shares with another by hard link (a fork) is never changed under it. What a
  layer may hold that a worktree may not — a FIFO, a socket, a device, an entry claiming an
  overlay redirect or metacopy — is not merged but removed, and said; the overlay's own
  extended attributes are taken off what is merged (the worktree is the next command's
  lower layer). No link is followed: every entry is taken by ``lstat``, and directories are
  entered only when they are directories.
* **A crash between merge steps**: a layer is marked ``merging`` before its first rename;
  the next command of the session finishes a marked layer's merge (each rename moved its
  entry out of the layer, so the rest is what is left) and drops an unmarked one (its
  command never ended).

Where the overlay cannot be mounted (``unavailable_reason`` says why), the shell writes into the
worktree as before and the sandbox keeps its undo point (``worktree_undo``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import change_journal, kept_usage
from .sandbox_args import bwrap_args
from .worktree_paths import real_dir
from .worktree_usage import open_up, walk, worktree_usage

log = logging.getLogger(__name__)

LAYERS = ".layers"
MERGING = "merging"  # the marker of a layer whose merge has begun
PREFIX = "user.overlay."
# Run by ``unshare`` in the command's new user and mount namespaces: mount the overlay, then
# become bubblewrap (``exec``: the same process, so killing its group kills the command).
# ``index=off``: a copy-up never keeps a lower file's other names (the merge refuses a file
# with a name outside its layer); ``metacopy=off``: a changed file's upper copy holds its data.
# (``userxattr`` keeps redirects off: renaming a lower directory gives EXDEV, and ``mv``
# copies it.)
MOUNT = (
    'mount -t overlay overlay -o "lowerdir=$1,upperdir=$2,workdir=$3,userxattr,index=off,'
    'metacopy=off" "$4" || exit 126; shift 4; exec "$@"'
)


@dataclass(frozen=True)
class Usage:
    """What a layer adds to its worktree: bytes (each name of a file its size, less the size
    of the file it replaces) and entries (new names, less those it deletes)."""

    bytes: int
    entries: int


@dataclass
class Merged:
    """A merge's outcome: the worktree paths it changed and the entries it would not move."""

    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Layer:
    root: Path
    worktree: Path

    @property
    def upper(self) -> Path:
        return self.root / "upper"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def merged(self) -> Path:
        return self.root / "merged"

    @classmethod
    def create(cls, worktree: Path) -> Layer:
        """A new empty layer over ``worktree``, after settling any its session left behind."""
        settle(worktree)
        root = worktree.parent / LAYERS / f"{worktree.name}-{secrets.token_hex(6)}"
        root.mkdir(parents=True, mode=0o700)
        for part in ("upper", "work", "merged"):
            (root / part).mkdir(mode=0o755)
        return cls(root, worktree)

    def wrap(self, bwrap: list[str]) -> list[str]:
        """The command line that mounts the overlay, then runs ``bwrap`` (which binds
        ``merged`` at ``/workspace``)."""
        unshare = shutil.which("unshare") or "unshare"
        paths = (self.worktree, self.upper, self.work, self.merged)
        return [
            unshare, "--user", "--map-root-user", "--mount", "--",
            "/bin/sh", "-c", MOUNT, "sh", *map(str, paths), *bwrap,
        ]  # fmt: skip

    def usage(self) -> Usage:
        """What the layer adds now (read while the command runs: entries may come and go):
        each entry against the one it replaces; a directory it removes or makes opaque
        (``rm -rf``, a directory replaced whole) without all that directory held."""
        size = entries = 0
        real: dict[str, bool] = {"": True}  # worktree directories known not to be links
        hidden: list[str] = []  # directories of the layer that hide what the worktree holds
        for relative, entry in walk(self.upper):
            try:
                info = entry.stat(follow_symlinks=False)
                parent = relative.rpartition("/")[0]
                covered = any(relative.startswith(h + "/") for h in hidden)
                below = (
                    _lstat(self.worktree / relative)
                    if not covered and real_dir(self.worktree, parent, real)
                    else None
                )
            except OSError:
                continue
            if below is not None and _hides(below, info, entry.path):
                gone = worktree_usage(self.worktree / relative)
                size, entries = size - gone[0], entries - gone[1]
                hidden.append(relative)
            if _whiteout(info):
                entries -= 1 if below else 0
                size -= _bytes(below)
                continue
            entries += 0 if below else 1
            size += _bytes(info) - _bytes(below)
        return Usage(size, entries)

    def merge(self) -> Merged:
        """Move the layer into the worktree (see the module); the layer is gone after."""
        (self.root / MERGING).touch()
        out = Merged()
        open_up(self.upper)
        _merge_dir(self.upper, self.worktree, "", _Pass(out, _names_within(self.upper)))
        # Told before the layer goes: a crash before this line leaves the merge to ``settle``.
        change_journal.record(self.worktree, out.changed)
        self.drop()
        return out

    def drop(self) -> None:
        """Remove the layer (undoing its command, when it was not merged)."""
        open_up(self.root)
        shutil.rmtree(self.root, ignore_errors=True)


def _bytes(info: os.stat_result | None) -> int:
    """An entry's bytes as ``worktree_usage`` counts them: a file's or a link's size."""
    if info is None or not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
        return 0
    return info.st_size


def _hides(below: os.stat_result, info: os.stat_result, path: str) -> bool:
    """Whether the layer's entry (``info`` at ``path``) takes the place of all that the
    worktree's directory ``below`` holds: a whiteout, a file, an opaque directory."""
    if not stat.S_ISDIR(below.st_mode):
        return False
    return _whiteout(info) or not stat.S_ISDIR(info.st_mode) or _opaque(Path(path))


def settle(worktree: Path) -> None:
    """Finish the merges a crash interrupted and drop the layers of commands that never
    ended, of ``worktree``'s session."""
    root = worktree.parent / LAYERS
    with contextlib.suppress(FileNotFoundError):
        for path in sorted(root.iterdir()):
            if not path.name.startswith(f"{worktree.name}-"):
                continue
            layer = Layer(path, worktree)
            if (path / MERGING).exists():
                log.warning("finishing the merge of %s, interrupted", path.name)
                layer.merge()
                # What the interrupted part moved was never told: the next snapshot walks,
                # the next bound check too.
                change_journal.forget(worktree)
                kept_usage.forget(worktree)
            else:
                layer.drop()


# -- the merge ----------------------------------------------------------------------------------
@dataclass
class _Pass:
    """One merge: its outcome, and how many names each regular file of the layer has in it."""

    out: Merged
    names: dict[tuple[int, int], int]

    def foreign(self, info: os.stat_result) -> bool:
        """A regular file with a name outside the layer: a hard link to a file the command
        could not have made (the merge never moves it)."""
        return info.st_nlink > self.names.get((info.st_dev, info.st_ino), 0)


def _names_within(upper: Path) -> dict[tuple[int, int], int]:
    names: dict[tuple[int, int], int] = {}
    for _, entry in walk(upper):
        with contextlib.suppress(OSError):
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(info.st_mode):
                key = (info.st_dev, info.st_ino)
                names[key] = names.get(key, 0) + 1
    return names


def _refused(path: Path, info: os.stat_result, run: _Pass) -> bool:
    """Whether the layer's entry at ``path`` may not be merged: a FIFO, a socket, a device;
    a hard link to a file outside the layer; an overlay redirect or metacopy (features this
    mount never turns on)."""
    mode = info.st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
        return True
    if stat.S_ISREG(mode) and run.foreign(info):
        return True
    return _claims(path, "redirect") or _claims(path, "metacopy")


def _merge_dir(upper: Path, target: Path, prefix: str, run: _Pass) -> None:
    with os.scandir(upper) as entries:
        names = sorted(entry.name for entry in entries)
    for name in names:
        source, dest, relative = upper / name, target / name, prefix + name
        info = _lstat(source)
        if info is None:
            continue
        if _whiteout(info):
            _remove(dest)
            run.out.changed.append(relative)
            os.unlink(source)
        elif _refused(source, info, run):
            run.out.removed.append(relative)  # never merged: taken out of the layer
            _remove(source)
        elif stat.S_ISDIR(info.st_mode):
            below = _lstat(dest)
            if below is not None and stat.S_ISDIR(below.st_mode) and not _opaque(source):
                _merge_dir(source, dest, relative + "/", run)
                continue
            _clean(source, relative + "/", run)
            if below is not None:
                run.out.changed.append(relative)  # what it held is gone
            _remove(dest)
            os.rename(source, dest)
        else:
            _strip(source)
            below = _lstat(dest)
            if below is not None and stat.S_ISDIR(below.st_mode):
                _remove(dest)
            os.replace(source, dest)
            run.out.changed.append(relative)


def _clean(directory: Path, prefix: str, run: _Pass) -> None:
    """Make a directory of the layer fit to be renamed into the worktree whole: its whiteouts
    (they hide nothing there), special files and overlay attributes taken out; its files
    listed as changed."""
    _strip(directory)
    with os.scandir(directory) as entries:
        found = list(entries)
    for entry in found:
        path, relative = Path(entry.path), prefix + entry.name
        info = _lstat(path)
        if info is None:
            continue
        if _whiteout(info):
            os.unlink(path)
        elif _refused(path, info, run):
            run.out.removed.append(relative)
            _remove(path)
        elif stat.S_ISDIR(info.st_mode):
            _clean(path, relative + "/", run)
        else:
            _strip(path)
            run.out.changed.append(relative)


def _remove(path: Path) -> None:
    """``path`` gone, a directory with all it holds; never following a link."""
    info = _lstat(path)
    if info is None:
        return
    if stat.S_ISDIR(info.st_mode):
        open_up(path)
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _whiteout(info: os.stat_result) -> bool:
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == 0


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _attributes(path: Path) -> list[str]:
    try:
        return [a for a in os.listxattr(path, follow_symlinks=False) if a.startswith(PREFIX)]
    except OSError:
        return []


def _claims(path: Path, feature: str) -> bool:
    return PREFIX + feature in _attributes(path)


def _opaque(path: Path) -> bool:
    try:
        return os.getxattr(path, PREFIX + "opaque", follow_symlinks=False) in (b"y", b"x")
    except OSError:
        return False


def _strip(path: Path) -> None:
    """The overlay's attributes off ``path`` (not a link's: links carry none we set)."""
    if path.is_symlink():
        return
    for name in _attributes(path):
        with contextlib.suppress(OSError):
            os.removexattr(path, name, follow_symlinks=False)


# -- availability -------------------------------------------------------------------------------
@functools.cache
def unavailable_reason(bwrap: str, root: Path) -> str:
    """'' when an overlay mounts here, beneath ``root`` (``WORKSPACE_ROOT``: a user namespace,
    overlayfs with ``userxattr`` on that filesystem) and bubblewrap runs over it as nobody;
    else why not."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".overlay-probe-", dir=root) as scratch:
        worktree = Path(scratch) / "probe"
        worktree.mkdir()
        (worktree / "a").write_text("a")
        layer = Layer.create(worktree)
        sandbox = bwrap_args(layer.merged, network=False, user=True)
        argv = layer.wrap([bwrap, *sandbox, "/bin/sh", "-c", "echo b > a"])
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"the overlay could not be tried ({exc})"
        if proc.returncode != 0:
            detail = proc.stderr.decode(errors="replace").strip()[:300] or proc.returncode
            return f"no overlay can be mounted in a user namespace here ({detail})"
        kept = (layer.upper / "a").read_text() if (layer.upper / "a").exists() else ""
        if (worktree / "a").read_text() != "a" or kept != "b\n":
            return "the overlay did not keep the command's writes in its layer"
        layer.drop()
    return ""
