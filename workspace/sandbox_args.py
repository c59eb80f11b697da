"""The command line of one sandboxed shell command: bubblewrap's mounts, namespaces and
environment (what the command sees, ``workspace/sandbox.py`` says why), the seccomp filter
handed to it through a pipe, and prlimit's rlimits around it all."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

INSIDE = "/workspace"  # where the worktree appears in the sandbox
PATH = "/usr/local/bin:/usr/bin:/bin"
# Read-only files of /etc a shell command expects (program alternatives, the loader cache,
# time zones), and for the network (when enabled) name resolution and certificates. Not /etc
# as a whole: it holds the services' own configuration.
ETC = ("alternatives", "ld.so.cache", "localtime", "mime.types")
ETC_NETWORK = ("resolv.conf", "hosts", "nsswitch.conf", "ssl", "ca-certificates")
# The kernel's key lists (/proc/keys shows the keys of the server's user), masked.
PROC_MASKED = ("keys", "key-users")
NOBODY = "65534"


def bwrap_args(
    worktree: Path,
    *,
    network: bool,
    bind_worktree: bool = True,
    user: bool = True,
    seccomp_fd: int | None = None,
) -> list[str]:
    """bubblewrap's options, up to the ``--`` before the command: the namespaces (a user one,
    as nobody, when ``user``), the read-only system, a private /tmp and /dev/shm, the worktree
    (unless ``bind_worktree`` is off: the availability probe has none) and the environment."""
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


def seccomp_fd(program: bytes) -> int:
    """A descriptor bwrap reads the filter from (a pipe, written and closed: bwrap reads to
    its end; the program is a few kilobytes, far below a pipe's buffer)."""
    read, write = os.pipe()
    try:
        os.write(write, program)
    finally:
        os.close(write)
    return read


def prlimit_args() -> list[str]:
    """prlimit and its rlimits, up to the ``--`` before the program it bounds."""
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


def argv(
    worktree: Path,
    command: str,
    *,
    user: bool,
    seccomp_fd: int | None = None,
    overlay: Callable[[list[str]], list[str]] | None = None,
) -> list[str]:
    """The whole command line of one sandboxed ``command`` (without its cgroup); ``user``:
    whether this host gives it a user namespace (``sandbox_probe``); ``seccomp_fd``: where
    bwrap reads the filter (``seccomp_fd``), None: no filter; ``overlay``: a layer's
    ``wrap``, with ``worktree`` its mount point (``layers``). Unconfined
    (``AGENT_SHELL_SANDBOX=off``): the rlimits alone."""
    if settings.AGENT_SHELL_SANDBOX == "off":
        return [*prlimit_args(), "/bin/sh", "-c", command]
    bwrap = shutil.which("bwrap") or "bwrap"
    network = settings.AGENT_SHELL_NETWORK
    args = [bwrap, *bwrap_args(worktree, network=network, user=user, seccomp_fd=seccomp_fd)]
    args += ["/bin/sh", "-c", command]
    return [*prlimit_args(), *(overlay(args) if overlay else args)]
