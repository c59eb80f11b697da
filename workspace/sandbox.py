"""The shell tool's sandbox: bubblewrap (``bwrap``, Debian's ``bubblewrap``), the sandbox
Flatpak is built on, rather than a hand-made chroot.

A command sees the session's worktree (at ``/workspace``, the only writable mount), the
system's programs read-only (``/usr`` and its links), a private ``/tmp`` of bounded size, its
own PID, IPC, UTS, cgroup and network namespaces (no network unless
``AGENT_SHELL_NETWORK=true``), an empty environment but ``PATH``, ``HOME`` and ``LANG``, and no
capabilities. Nothing else of the platform is there: no other worktree, no snapshot store, no
settings, no server environment. The command runs as ``nobody`` (uid and gid 65534) of a user
namespace of its own, which is the server's user outside: what it writes in the worktree stays
the server's. A seccomp filter (``workspace/seccomp.py``) refuses the kernel keyring (shared
with the server's user: ``/proc/keys`` is masked too), mounts, namespaces, modules, ``bpf``
and the other calls a container runtime refuses, with ``EPERM``. ``/dev`` is read-only but for
its devices and a ``/dev/shm`` of ``AGENT_SHELL_TMP_BYTES``, as ``/tmp``.

Limits: rlimits (``prlimit``, util-linux) on address space, processes, file size, CPU seconds
and open files; where cgroups can be written (v1 or v2; beneath the server's own cgroup when
it may, so the service's own limits still hold, else at the hierarchy's top), a cgroup per
command caps its processes (``pids``) and the memory of all of them together, tmpfs pages
of ``/tmp`` and ``/dev/shm`` included (``memory``, ``AGENT_SHELL_MEMORY_BYTES``, no swap);
a kill by the memory bound ends the whole command. The wall time (``AGENT_SHELL_TIMEOUT``),
the output kept (``AGENT_SHELL_OUTPUT_MAX``) and the worktree's size and entries
(``WORKTREE_MAX_BYTES``, ``WORKTREE_MAX_ENTRIES``, watched every half second while it runs)
are enforced here; ``Undo`` puts back the worktree of a command that went over them.

What the host lacks is said once in the log and by ``limitations()``: without a user
namespace the command runs as the server's user; without seccomp it can reach the kernel
keyring and the calls listed above (the namespaces still confine it); without a writable
memory cgroup its memory is bounded per process only (the address-space rlimit).

Stopping: the command runs in a session (process group) of its own; ``kill()`` SIGKILLs that
group, which is ``bwrap`` itself; ``--die-with-parent`` then kills the namespace's first
process, and with it the kernel kills every process of the namespace, double-forked daemons
included. The cgroup, where there is one, is emptied as well.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import functools
import logging
import os
import shutil
import signal
import stat
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from django.conf import settings

from . import seccomp

log = logging.getLogger(__name__)

INSIDE = "/workspace"  # where the worktree appears in the sandbox
PATH = "/usr/local/bin:/usr/bin:/bin"
# Read-only files of /etc a shell command expects (program alternatives, the loader cache,
# time zones), and for the network (when enabled) name resolution and certificates. Not /etc
# as a whole: it holds the services' own configuration.
ETC = ("alternatives", "ld.so.cache", "localtime", "mime.types")
ETC_NETWORK = ("resolv.conf", "hosts", "nsswitch.conf", "ssl", "ca-certificates")
# The kernel's key lists (/proc/keys shows the keys of the server's user), masked.
PROC_MASKED = ("keys", "key-users")
KILL_CHECK_SECONDS = 0.05
SIZE_CHECK_SECONDS = 0.5


class Unavailable(Exception):
    """The sandbox cannot start here; the message says why."""


@dataclass
class Outcome:
    exit_code: int | None  # None: killed (stopped, timed out, over a limit)
    output: str
    truncated: bool
    stopped: str = ""  # "", "stopped", "timeout", "worktree-size", "memory"


# -- availability -------------------------------------------------------------------------------
NOBODY = "65534"


@dataclass(frozen=True)
class _Host:
    """What this machine's sandbox can do, found out once: ``reason`` ('' when it starts),
    whether commands run as nobody in a user namespace, the seccomp filter (b'': none), and
    what is lost, in sentences."""

    reason: str
    user: bool = False
    seccomp: bytes = b""
    lost: tuple[str, ...] = ()


def _try(bwrap: str, *, user: bool, program: bytes) -> str:
    """'' when a trivial command runs in such a sandbox; else why not."""
    read = _seccomp_fd(program) if program else None
    try:
        args = _base_args(Path("/"), network=False, bind_worktree=False, user=user, seccomp_fd=read)
        proc = subprocess.run(
            [bwrap, *args, "/bin/true"],
            capture_output=True,
            timeout=10,
            pass_fds=(read,) if read is not None else (),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap could not run: {exc}"
    finally:
        if read is not None:
            os.close(read)
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace").strip()[:300]
        return f"bubblewrap cannot create a sandbox on this machine: {detail}"
    return ""


@functools.cache
def _probe(bwrap: str) -> _Host:
    lost: list[str] = []
    try:
        program = seccomp.program()
    except seccomp.Unavailable as exc:
        program = b""
        lost.append(
            f"No seccomp filter ({exc}): shell commands can use the kernel keyring of the "
            "server's user and the system calls a container runtime refuses."
        )
    reason = _try(bwrap, user=True, program=program)
    if reason and program and not _try(bwrap, user=True, program=b""):
        lost.append(
            f"The kernel refused the seccomp filter ({reason}): shell commands can use the "
            "kernel keyring of the server's user and the system calls a container runtime "
            "refuses."
        )
        program, reason = b"", ""
    user = not reason
    if reason and not _try(bwrap, user=False, program=program):
        lost.append(
            f"No user namespace for the sandbox ({reason}): shell commands run as the "
            "server's own user, not as nobody."
        )
        reason = ""
    if reason:
        return _Host(reason)
    if _cgroup_roots().get("memory") is None:
        lost.append(
            "No writable memory cgroup: a shell command's memory is bounded per process only "
            "(AGENT_SHELL_MEMORY_BYTES of address space each), not for all its processes, "
            "/tmp and /dev/shm together."
        )
    if _cgroup_roots().get("pids") is None:
        lost.append(
            "No writable pids cgroup: a shell command's processes are bounded by the "
            "AGENT_SHELL_PROCESSES rlimit only, which counts per user."
        )
    for sentence in lost:
        log.warning("shell sandbox: %s", sentence)
    return _Host("", user=user, seccomp=program, lost=tuple(lost))


def unavailable_reason() -> str:
    """Why ``shell`` cannot run here ('' when it can): disabled by the deployment, or no
    working sandbox. ``AGENT_SHELL_SANDBOX=off`` (the operator's choice) runs unconfined."""
    if not settings.AGENT_ALLOW_SHELL:
        return "The shell tool is disabled on this deployment (AGENT_ALLOW_SHELL is off)."
    if settings.AGENT_SHELL_SANDBOX == "off":
        return ""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return (
            "The shell tool is disabled: its sandbox, bubblewrap (bwrap), is not installed "
            "(Debian: apt-get install bubblewrap)."
        )
    if shutil.which("prlimit") is None:
        return "The shell tool is disabled: prlimit (util-linux) is not installed."
    reason = _probe(bwrap).reason
    return f"The shell tool is disabled: {reason}" if reason else ""


def limitations() -> list[str]:
    """What the sandbox cannot do on this host, in sentences ([] when it has every part;
    logged once when first found out). Only meaningful when ``unavailable_reason()`` is ''."""
    if settings.AGENT_SHELL_SANDBOX == "off":
        return ["AGENT_SHELL_SANDBOX=off: shell commands run unconfined, with rlimits only."]
    bwrap = shutil.which("bwrap")
    return list(_probe(bwrap).lost) if bwrap else []


# -- the command line -----------------------------------------------------------------------------
def _base_args(
    worktree: Path,
    *,
    network: bool,
    bind_worktree: bool = True,
    user: bool = True,
    seccomp_fd: int | None = None,
) -> list[str]:
    args = ["--unshare-all"]
    if network:
        args.append("--share-net")
    if user:
        args += ["--unshare-user", "--uid", NOBODY, "--gid", NOBODY]
    args += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    args += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), f"/{name}"]
        elif path.is_dir():
            args += ["--ro-bind", str(path), f"/{name}"]
    for name in ETC + (ETC_NETWORK if network else ()):
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    args += ["--proc", "/proc"]
    for name in PROC_MASKED:
        if Path("/proc", name).exists():
            args += ["--ro-bind", "/dev/null", f"/proc/{name}"]
    # /dev read-only but its devices and a bounded /dev/shm (bwrap's own /dev is a tmpfs of
    # no size: shared memory past every limit).
    tmp = str(settings.AGENT_SHELL_TMP_BYTES)
    args += ["--dev", "/dev", "--size", tmp, "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    args += ["--size", tmp, "--tmpfs", "/tmp"]
    if bind_worktree:
        args += ["--bind", str(worktree), INSIDE, "--chdir", INSIDE]
    args += ["--clearenv", "--setenv", "PATH", PATH, "--setenv", "HOME", INSIDE]
    args += ["--setenv", "LANG", "C.UTF-8", "--setenv", "TMPDIR", "/tmp"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--hostname", "sandbox", "--"]
    return args


def _seccomp_fd(program: bytes) -> int:
    """A descriptor bwrap reads the filter from (a pipe, written and closed: bwrap reads to
    its end; the program is a few kilobytes, far below a pipe's buffer)."""
    read, write = os.pipe()
    try:
        os.write(write, program)
    finally:
        os.close(write)
    return read


def _limits() -> list[str]:
    timeout = settings.AGENT_SHELL_TIMEOUT
    return [
        shutil.which("prlimit") or "prlimit",
        f"--as={settings.AGENT_SHELL_MEMORY_BYTES}",
        f"--nproc={settings.AGENT_SHELL_PROCESSES}",
        f"--fsize={settings.WORKTREE_MAX_FILE_BYTES or 'unlimited'}",
        f"--cpu={int(timeout) + 1}",
        "--nofile=1024",
        "--core=0",
        "--",
    ]


def argv(worktree: Path, command: str, *, seccomp_fd: int | None = None) -> list[str]:
    """The whole command line of one sandboxed ``command`` (without its cgroup);
    ``seccomp_fd``: where bwrap reads the filter (``_seccomp_fd``), None: no filter."""
    if settings.AGENT_SHELL_SANDBOX == "off":
        return [*_limits(), "/bin/sh", "-c", command]
    bwrap = shutil.which("bwrap") or "bwrap"
    network = settings.AGENT_SHELL_NETWORK
    user = _probe(bwrap).user
    args = _base_args(worktree, network=network, user=user, seccomp_fd=seccomp_fd)
    return [*_limits(), bwrap, *args, "/bin/sh", "-c", command]


# -- the command's cgroups ------------------------------------------------------------------------
CGROUP = Path("/sys/fs/cgroup")


def _own_cgroup(controller: str) -> str:
    """This process's cgroup in ``controller``'s v1 hierarchy ('' : the v2 one), e.g. '/a/b'."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return "/"
    for line in lines:
        _, names, path = line.split(":", 2)
        if (controller and controller in names.split(",")) or (not controller and not names):
            return path
    return "/"


def _writable_root(base: Path, own: str, check: Callable[[Path], None]) -> Path | None:
    """``agentplat-shell`` beneath this process's own cgroup (so the service's limits still
    bound the commands, and a delegated subtree works without root), else beside it (cgroup
    v2 puts no process in a cgroup whose controllers its children use: systemd's
    ``DelegateSubgroup=`` runs the service one level down for that), else beneath the
    hierarchy's top; ``check`` makes it ready and proves a child of it can be written."""
    own_path = base / own.strip("/")
    for parent in dict.fromkeys([own_path, own_path.parent, base]):
        if base not in (parent, *parent.parents):
            continue
        root = parent / "agentplat-shell"
        try:
            made = not root.exists()
            root.mkdir(exist_ok=True)
        except OSError:
            continue
        try:
            check(root)
        except OSError:
            if made:
                with contextlib.suppress(OSError):
                    root.rmdir()
            continue
        return root
    return None


def _probe_child(root: Path, name: str, value: str) -> None:
    probe = root / f"probe-{os.getpid()}"
    probe.mkdir(exist_ok=True)
    try:
        (probe / name).write_text(value)
    finally:
        probe.rmdir()


@functools.cache
def _cgroup_roots() -> dict[str, Path]:
    """Where per-command cgroups are made, by controller (``pids``, ``memory``); a controller
    missing: none can be written here (then rlimits alone bound it)."""
    roots: dict[str, Path] = {}
    probes = (("pids", "pids.max", "8"), ("memory", "memory.limit_in_bytes", "67108864"))
    for controller, limit, value in probes:
        base = CGROUP / controller
        if (base / "cgroup.procs").exists():  # v1: one hierarchy per controller
            check = functools.partial(_probe_child, name=limit, value=value)
            if root := _writable_root(base, _own_cgroup(controller), check):
                roots[controller] = root
    controllers = CGROUP / "cgroup.controllers"
    missing = [c for c in ("pids", "memory") if c not in roots]
    if missing and controllers.exists():  # v2: one hierarchy
        available = [c for c in missing if c in controllers.read_text().split()]

        def check(root: Path) -> None:
            for controller in available:
                # The parent passes the controller down where it may (a delegated service
                # cgroup without processes of its own); it has it already where it may not.
                with contextlib.suppress(OSError):
                    (root.parent / "cgroup.subtree_control").write_text(f"+{controller}")
                (root / "cgroup.subtree_control").write_text(f"+{controller}")
            if "pids" in available:
                _probe_child(root, "pids.max", "8")
            else:
                _probe_child(root, "memory.max", "67108864")

        if available and (root := _writable_root(CGROUP, _own_cgroup(""), check)):
            roots.update(dict.fromkeys(available, root))
    return roots


def _cgroup_root() -> Path | None:
    """Where the per-command ``pids`` cgroups are made (None: rlimits alone)."""
    return _cgroup_roots().get("pids")


class _Cgroup:
    """One command's cgroups (one per v1 hierarchy, one in v2): its processes and the
    memory of all of them together bounded."""

    def __init__(self) -> None:
        self.paths: list[Path] = []
        self.memory: Path | None = None
        name = uuid.uuid4().hex
        for controller, root in _cgroup_roots().items():
            path = root / name
            try:
                if path not in self.paths:
                    path.mkdir()
                    self.paths.append(path)
                v2 = (root / "cgroup.controllers").exists()
                for file, value in self._limits(controller, v2=v2):
                    if (path / file).exists():
                        (path / file).write_text(value)
            except OSError:
                log.warning("could not make a %s cgroup for a shell command", controller)
                continue
            if controller == "memory":
                self.memory = path

    @staticmethod
    def _limits(controller: str, *, v2: bool) -> list[tuple[str, str]]:
        if controller == "pids":
            return [("pids.max", str(settings.AGENT_SHELL_PROCESSES))]
        memory = str(settings.AGENT_SHELL_MEMORY_BYTES)
        if v2:  # no swap; an out-of-memory kill takes the whole group
            return [("memory.max", memory), ("memory.swap.max", "0"), ("memory.oom.group", "1")]
        # memsw (memory + swap) is there when swap is accounted: set after the memory limit,
        # which it may not be below.
        return [("memory.limit_in_bytes", memory), ("memory.memsw.limit_in_bytes", memory)]

    def wrap(self, argv: list[str]) -> list[str]:
        """The command enters its cgroups before it execs (so every child is counted)."""
        if not self.paths:
            return argv
        enter = "; ".join(f'echo $$ > "${i}" || exit 125' for i in range(1, len(self.paths) + 1))
        procs = [str(path / "cgroup.procs") for path in self.paths]
        script = f'{enter}; shift {len(procs)}; exec "$@"'
        return ["/bin/sh", "-c", script, "sh", *procs, *argv]

    def oom_kills(self) -> int:
        """Processes the memory bound has killed so far (v1 ``memory.oom_control``, v2
        ``memory.events``: the ``oom_kill`` line, Linux 4.13 and later)."""
        if self.memory is None:
            return 0
        for name in ("memory.events", "memory.oom_control"):
            try:
                text = (self.memory / name).read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def kill(self) -> None:
        for path in self.paths:
            for _ in range(50):
                try:
                    pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.01)

    def remove(self) -> None:
        self.kill()
        for path in self.paths:
            for _ in range(100):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # processes still leaving
                    time.sleep(0.01)
            else:
                log.warning("shell cgroup %s could not be removed", path)


# -- the worktree's size and what it held before a command ------------------------------------
def _walk(root: Path) -> Iterator[tuple[str, os.DirEntry]]:
    """Every entry beneath ``root`` (path relative to it, entry), links never followed."""
    stack = [""]
    while stack:
        relative = stack.pop()
        try:
            with os.scandir(os.path.join(root, relative)) as entries:
                for entry in entries:
                    name = os.path.join(relative, entry.name)
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(name)
                    except OSError:
                        continue
                    yield name, entry
        except OSError:
            continue


def worktree_usage(root: Path) -> tuple[int, int]:
    """(bytes of the worktree's files as ``ls -l`` counts them, entries: files, directories,
    links and others, each an inode and a directory slot)."""
    total = count = 0
    for _, entry in _walk(root):
        count += 1
        try:
            if not entry.is_dir(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total, count


def worktree_bytes(root: Path) -> int:
    """Bytes the worktree's files take (as ``ls -l`` counts them; links not followed)."""
    return worktree_usage(root)[0]


def _kind(entry: os.DirEntry) -> tuple[str, int]:
    try:
        if entry.is_dir(follow_symlinks=False):
            return "d", 0
        if entry.is_symlink():
            return "l", 0
        return ("f" if entry.is_file(follow_symlinks=False) else "o"), entry.stat(
            follow_symlinks=False
        ).st_size
    except OSError:
        return "o", 0


class SnapshotsLike(Protocol):
    def track(self) -> str: ...
    def restore(self, tree: str) -> None: ...


@dataclass
class Undo:
    """A worktree as it was before a command: a snapshot (``track``, which the loop may take:
    it holds the session's lock) and the list of every entry, kind and size, for what
    snapshots do not hold (files over ``SNAPSHOT_MAX_FILE_BYTES``, ignored ones, names git
    refuses, empty directories, a nested ``.git``)."""

    worktree: Path
    snapshots: SnapshotsLike
    tree: str
    entries: dict[str, tuple[str, int]]

    @classmethod
    def record(cls, worktree: Path, snapshots: SnapshotsLike) -> Undo:
        tree = snapshots.track()
        entries = {name: _kind(entry) for name, entry in _walk(worktree)}
        return cls(worktree, snapshots, tree, entries)

    def apply(self) -> list[str]:
        """Put the worktree back (the command's processes are gone): every entry it made
        is deleted (first: the bulk of what it wrote never reaches the snapshot store),
        then the snapshot is restored. The paths that could not be put back (changed files
        snapshots do not hold), [] when it is exactly as before."""
        _open_up(self.worktree)
        doomed = [
            name
            for name, entry in _walk(self.worktree)
            if self.entries.get(name, ("", 0))[0] != _kind(entry)[0]
        ]
        for name in doomed:  # a directory before its contents (the walk's order)
            path = os.path.join(self.worktree, name)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)  # by descriptor, never following a link
                else:
                    os.unlink(path)
            except FileNotFoundError:
                continue
        self.snapshots.restore(self.tree)
        now = {name: _kind(entry) for name, entry in _walk(self.worktree)}
        return sorted(name for name, was in self.entries.items() if now.get(name) != was)


def _open_up(root: Path) -> None:
    """Give the owner (the server: the command ran as its user) every right on every
    directory beneath ``root`` again: a command may leave one it cannot list or write
    (``chmod 0``), which nothing could then delete nor restore. Only once the command's
    processes are gone: no link can be swapped in meanwhile (and none is followed)."""
    stack = [str(root)]
    while stack:
        path = stack.pop()
        try:
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode) and mode & 0o700 != 0o700:
                os.chmod(path, stat.S_IMODE(mode) | 0o700)
            with os.scandir(path) as entries:
                stack.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            continue


# -- running one command ------------------------------------------------------------------------
async def run(
    worktree: Path,
    command: str,
    *,
    on_output: Callable[[str], Awaitable[None]],
    should_stop: Callable[[], bool],
    tree_limit: int | None = None,
) -> Outcome:
    """Run ``command`` in the sandbox, handing its output (stdout and stderr, in the order
    they come) to ``on_output`` as it arrives, until it exits, ``should_stop()`` turns true,
    its time is up, the worktree outgrows its limits (``tree_limit``, default
    ``WORKTREE_MAX_BYTES``, 0: none; ``WORKTREE_MAX_ENTRIES``) or the memory bound kills one
    of its processes; then no process of it is left."""
    tree_limit = settings.WORKTREE_MAX_BYTES if tree_limit is None else tree_limit
    entry_limit = settings.WORKTREE_MAX_ENTRIES
    if tree_limit or entry_limit:
        # A worktree already over a limit (a quota lowered) may shrink, never grow.
        size, entries = await asyncio.to_thread(worktree_usage, worktree)
        tree_limit = tree_limit and max(tree_limit, size)
        entry_limit = entry_limit and max(entry_limit, entries)
    started = time.monotonic()
    cgroup = await asyncio.to_thread(_Cgroup)
    program = b""
    if settings.AGENT_SHELL_SANDBOX != "off":
        program = _probe(shutil.which("bwrap") or "bwrap").seccomp
    filter_fd = _seccomp_fd(program) if program else None
    try:
        proc = await asyncio.create_subprocess_exec(
            *cgroup.wrap(argv(worktree, command, seccomp_fd=filter_fd)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=(filter_fd,) if filter_fd is not None else (),
            **_process_args(worktree),
        )
    except BaseException:
        await asyncio.to_thread(cgroup.remove)
        raise
    finally:
        if filter_fd is not None:
            os.close(filter_fd)
    assert proc.stdout is not None
    keep = settings.AGENT_SHELL_OUTPUT_MAX
    decoder = _decoder()
    kept: list[str] = []
    kept_len, truncated, stopped = 0, False, ""
    deadline = started + settings.AGENT_SHELL_TIMEOUT
    next_size_check = started + SIZE_CHECK_SECONDS
    reader = asyncio.ensure_future(proc.stdout.read(65536))
    try:
        while True:
            done, _ = await asyncio.wait({reader}, timeout=KILL_CHECK_SECONDS)
            if done:
                chunk = reader.result()
                if not chunk:
                    break
                text = decoder.decode(chunk)
                if text and not truncated:
                    room = keep - kept_len
                    if len(text) > room:
                        text, truncated = text[:room], True
                    if text:
                        kept.append(text)
                        kept_len += len(text)
                        await on_output(text)
                reader = asyncio.ensure_future(proc.stdout.read(65536))
            now = time.monotonic()
            if should_stop():
                stopped = "stopped"
            elif now >= deadline:
                stopped = "timeout"
            elif cgroup.oom_kills():
                stopped = "memory"
            elif (tree_limit or entry_limit) and now >= next_size_check:
                next_size_check = now + SIZE_CHECK_SECONDS
                size, entries = await asyncio.to_thread(worktree_usage, worktree)
                if (tree_limit and size > tree_limit) or (entry_limit and entries > entry_limit):
                    stopped = "worktree-size"
            if stopped:
                break
        if not stopped and cgroup.oom_kills():  # it ended, but one of its processes was killed
            stopped = "memory"
    finally:
        if not reader.done():
            reader.cancel()
        if stopped or proc.returncode is None:
            _kill_group(proc.pid)
        try:
            code = await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            code = None
        await asyncio.to_thread(cgroup.remove)
    if not stopped and (tree_limit or entry_limit):
        # The last half second: a command that wrote past the limit and ended before the
        # next check is over it all the same.
        size, entries = await asyncio.to_thread(worktree_usage, worktree)
        if (tree_limit and size > tree_limit) or (entry_limit and entries > entry_limit):
            stopped = "worktree-size"
    tail = decoder.decode(b"", final=True)
    if tail and not truncated and kept_len + len(tail) <= keep:
        kept.append(tail)
        await on_output(tail)
    return Outcome(
        exit_code=None if stopped else code,
        output="".join(kept),
        truncated=truncated,
        stopped=stopped,
    )


def _process_args(worktree: Path) -> dict:
    """Environment and directory of the first process: nothing of the server's. In the
    sandbox (bwrap's own ``--chdir``/``--setenv`` place the command); unconfined
    (``AGENT_SHELL_SANDBOX=off``), the worktree itself."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    if settings.AGENT_SHELL_SANDBOX == "off":
        return {"env": {**env, "HOME": str(worktree)}, "cwd": str(worktree)}
    return {"env": env, "cwd": "/"}


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _decoder() -> codecs.IncrementalDecoder:
    return codecs.getincrementaldecoder("utf-8")(errors="replace")
