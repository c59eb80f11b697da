"""What this machine's shell sandbox can do, found out once by starting a trivial command in
it: whether bubblewrap starts at all, with a user namespace (the command as nobody) or
without, with the seccomp filter or without, and which cgroups can bound it. What is lost is
said once in the log (``shell sandbox: …``) and kept as sentences for ``sandbox.limitations``.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import seccomp
from .sandbox_args import bwrap_args, seccomp_fd
from .sandbox_cgroups import cgroup_roots

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Host:
    """What this machine's sandbox can do: ``reason`` ('' when it starts), whether commands
    run as nobody in a user namespace, the seccomp filter (b'': none), and what is lost, in
    sentences."""

    reason: str
    user: bool = False
    seccomp: bytes = b""
    lost: tuple[str, ...] = ()


def _try(bwrap: str, *, user: bool, program: bytes) -> str:
    """'' when a trivial command runs in such a sandbox; else why not."""
    read = seccomp_fd(program) if program else None
    try:
        args = bwrap_args(Path("/"), network=False, bind_worktree=False, user=user, seccomp_fd=read)
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
def probe(bwrap: str) -> Host:
    """This host's sandbox with the ``bwrap`` binary: each part given up in turn (the seccomp
    filter, then the user namespace) until a command starts; ``reason`` when none does."""
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
        return Host(reason)
    lost += _cgroups_lost()
    for sentence in lost:
        log.warning("shell sandbox: %s", sentence)
    return Host("", user=user, seccomp=program, lost=tuple(lost))


def _cgroups_lost() -> list[str]:
    """What the cgroups this host lets be written leave unbounded, in sentences."""
    lost = []
    if cgroup_roots().get("memory") is None:
        lost.append(
            "No writable memory cgroup: a shell command's memory is bounded per process only "
            "(AGENT_SHELL_MEMORY_BYTES of address space each), not for all its processes, "
            "/tmp and /dev/shm together."
        )
    if cgroup_roots().get("pids") is None:
        lost.append(
            "No writable pids cgroup: a shell command's processes are bounded by the "
            "AGENT_SHELL_PROCESSES rlimit only, which counts per user."
        )
    return lost
