"""The shell tool's sandbox: bubblewrap (``bwrap``, Debian's ``bubblewrap``), the sandbox
Flatpak is built on, rather than a hand-made chroot.

A command sees the session's worktree (at ``/workspace``, the only writable mount), the
system's programs read-only (``/usr`` and its links), a private ``/tmp`` of bounded size, its
own PID, IPC, UTS, cgroup and network namespaces (no network unless
``AGENT_SHELL_NETWORK=true``), an empty environment but ``PATH``, ``HOME`` and ``LANG``, and no
capabilities. Nothing else of the platform is there: no other worktree, no snapshot store, no
settings, no server environment.

Limits: rlimits (``prlimit``, util-linux) on address space, processes, file size, CPU seconds
and open files; where the ``pids`` cgroup can be written (cgroup v1 or v2), a cgroup per
command caps its processes whatever its user (rlimits on processes do not bind root); the
wall time (``AGENT_SHELL_TIMEOUT``), the output kept (``AGENT_SHELL_OUTPUT_MAX``) and the
worktree's size (``WORKTREE_MAX_BYTES``, watched while it runs) are enforced here.

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
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

log = logging.getLogger(__name__)

INSIDE = "/workspace"  # where the worktree appears in the sandbox
PATH = "/usr/local/bin:/usr/bin:/bin"
# Read-only files of /etc a shell command expects (program alternatives, the loader cache,
# time zones), and for the network (when enabled) name resolution and certificates. Not /etc
# as a whole: it holds the services' own configuration.
ETC = ("alternatives", "ld.so.cache", "localtime", "mime.types")
ETC_NETWORK = ("resolv.conf", "hosts", "nsswitch.conf", "ssl", "ca-certificates")
KILL_CHECK_SECONDS = 0.05
SIZE_CHECK_SECONDS = 0.5


class Unavailable(Exception):
    """The sandbox cannot start here; the message says why."""


@dataclass
class Outcome:
    exit_code: int | None  # None: killed (stopped, timed out, over a limit)
    output: str
    truncated: bool
    stopped: str = ""  # "", "stopped", "timeout", "worktree-size"


# -- availability -------------------------------------------------------------------------------
@functools.cache
def _probe(bwrap: str) -> str:
    """'' when a trivial command runs in the sandbox; else why not."""
    try:
        proc = subprocess.run(
            [bwrap, *_base_args(Path("/"), network=False, bind_worktree=False), "/bin/true"],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap could not run: {exc}"
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace").strip()[:300]
        return f"bubblewrap cannot create a sandbox on this machine: {detail}"
    return ""


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
    reason = _probe(bwrap)
    return f"The shell tool is disabled: {reason}" if reason else ""


# -- the command line -----------------------------------------------------------------------------
def _base_args(worktree: Path, *, network: bool, bind_worktree: bool = True) -> list[str]:
    args = ["--unshare-all"]
    if network:
        args.append("--share-net")
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
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--size", str(settings.AGENT_SHELL_TMP_BYTES), "--tmpfs", "/tmp"]
    if bind_worktree:
        args += ["--bind", str(worktree), INSIDE, "--chdir", INSIDE]
    args += ["--clearenv", "--setenv", "PATH", PATH, "--setenv", "HOME", INSIDE]
    args += ["--setenv", "LANG", "C.UTF-8", "--setenv", "TMPDIR", "/tmp"]
    args += ["--hostname", "sandbox", "--"]
    return args


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


def argv(worktree: Path, command: str) -> list[str]:
    """The whole command line of one sandboxed ``command`` (without its cgroup)."""
    if settings.AGENT_SHELL_SANDBOX == "off":
        return [*_limits(), "/bin/sh", "-c", command]
    bwrap = shutil.which("bwrap") or "bwrap"
    network = settings.AGENT_SHELL_NETWORK
    return [*_limits(), bwrap, *_base_args(worktree, network=network), "/bin/sh", "-c", command]


# -- the pids cgroup ---------------------------------------------------------------------------
@functools.cache
def _cgroup_root() -> Path | None:
    """A writable place for per-command ``pids`` cgroups, or None (then rlimits alone)."""
    candidates = [Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")]
    for base in candidates:
        if not (base / "cgroup.procs").exists():
            continue
        if base == Path("/sys/fs/cgroup"):
            controllers = base / "cgroup.controllers"
            if not controllers.exists() or "pids" not in controllers.read_text().split():
                continue
        root = base / "agentplat-shell"
        try:
            root.mkdir(exist_ok=True)
            if base == Path("/sys/fs/cgroup"):
                (root / "cgroup.subtree_control").write_text("+pids")
            probe = root / f"probe-{os.getpid()}"
            probe.mkdir(exist_ok=True)
            (probe / "pids.max").write_text("8")
            probe.rmdir()
        except OSError:
            continue
        return root
    return None


class _Cgroup:
    def __init__(self) -> None:
        self.path: Path | None = None
        root = _cgroup_root()
        if root is None:
            return
        path = root / uuid.uuid4().hex
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(settings.AGENT_SHELL_PROCESSES))
        except OSError:
            log.warning("could not make a pids cgroup for a shell command", exc_info=True)
            return
        self.path = path

    def wrap(self, argv: list[str]) -> list[str]:
        """The command enters its cgroup before it execs (so every child is counted)."""
        if self.path is None:
            return argv
        procs = str(self.path / "cgroup.procs")
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, *argv]

    def kill(self) -> None:
        if self.path is None:
            return
        for _ in range(50):
            try:
                pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            except OSError:
                return
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        if self.path is None:
            return
        self.kill()
        for _ in range(100):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # processes still leaving
                time.sleep(0.01)
        log.warning("shell cgroup %s could not be removed", self.path)


# -- running one command ------------------------------------------------------------------------
def worktree_bytes(root: Path) -> int:
    """Bytes the worktree's files take (as ``ls -l`` counts them; links not followed)."""
    total, stack = 0, [str(root)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        else:
                            total += entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue
        except OSError:
            continue
    return total


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
    its time is up or the worktree outgrows its limit (``tree_limit``, default
    ``WORKTREE_MAX_BYTES``; 0: none); then no process of it is left."""
    started = time.monotonic()
    cgroup = await asyncio.to_thread(_Cgroup)
    proc = await asyncio.create_subprocess_exec(
        *cgroup.wrap(argv(worktree, command)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        **_process_args(worktree),
    )
    assert proc.stdout is not None
    keep = settings.AGENT_SHELL_OUTPUT_MAX
    decoder = _decoder()
    kept: list[str] = []
    kept_len, truncated, stopped = 0, False, ""
    deadline = started + settings.AGENT_SHELL_TIMEOUT
    next_size_check = started + SIZE_CHECK_SECONDS
    tree_limit = settings.WORKTREE_MAX_BYTES if tree_limit is None else tree_limit
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
            elif tree_limit and now >= next_size_check:
                next_size_check = now + SIZE_CHECK_SECONDS
                if await asyncio.to_thread(worktree_bytes, worktree) > tree_limit:
                    stopped = "worktree-size"
            if stopped:
                break
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
