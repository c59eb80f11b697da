"""Several worker hosts on this machine for end-to-end tests (issue 45): each host a Celery
worker process with a ``WORKER_HOST`` and a ``WORKSPACE_ROOT`` of its own, in a network
namespace of its own where this machine lets the test make one, and a way to lose a host
whole (every process SIGKILLed, its disk deleted).

**The network namespace.** ``unshare -n`` gives the worker a namespace with nothing but its
own loopback: it sees no port of this machine. The ports it needs (PostgreSQL, Redis, the
central store's git server) are carried into it over Unix sockets, which a namespace does
not separate (the filesystem is shared): ``socat`` in this machine's namespace listens on a
socket per port and connects to ``127.0.0.1:<port>``; ``socat`` inside the host's namespace
listens on ``127.0.0.1:<port>`` there and connects to the socket. The worker therefore uses
the same URLs as on loopback (the git server's certificate for 127.0.0.1 still holds), and
nothing else of this machine's network (Daphne's port, the other host's) is reachable from
it. Where ``unshare -n`` or ``socat`` is missing or refused (no CAP_SYS_ADMIN), the hosts
share loopback (``HostSet.isolated`` says which).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .stack import BIN, Processes, free_port


def netns_available() -> bool:
    """Whether this machine lets us make a network namespace and relay ports into it."""
    if not (shutil.which("unshare") and shutil.which("socat") and shutil.which("ip")):
        return False
    try:
        made = subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return made.returncode == 0


def worker_args(name: str) -> list[str]:
    """A Celery worker as tests/e2e/stack.py starts one (one process, a pool of threads)."""
    return [
        str(BIN / "celery"),
        "-A",
        "config",
        "worker",
        "-l",
        "warning",
        "--pool",
        "threads",
        "-c",
        "4",
        "--prefetch-multiplier",
        "1",
        "-n",
        f"{name}-{os.getpid()}-{free_port()}@%h",
    ]


def _in_namespace(args: list[str], ports: list[int], sockets: Path) -> list[str]:
    """``args`` in a network namespace of its own, ``ports`` relayed in (see the module)."""
    lines = ["set -e", "ip link set lo up"]
    for port in ports:
        sock = shlex.quote(str(sockets / f"{port}.sock"))
        lines.append(f"socat TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:{sock} &")
    for port in ports:  # each relay listening before the worker connects
        lines.append(f"until (: </dev/tcp/127.0.0.1/{port}) 2>/dev/null; do sleep 0.05; done")
    lines.append("exec " + shlex.join(args))
    return ["unshare", "-n", "--", "bash", "-c", "\n".join(lines)]


@dataclass
class Host:
    name: str
    root: Path
    procs: list[subprocess.Popen] = field(default_factory=list)

    def alive(self) -> bool:
        return any(p.poll() is None for p in self.procs)


class HostSet:
    """Worker hosts sharing ``env`` (database, Redis, central store), each with its own root
    under ``tmp`` and, where possible, its own network namespace reaching only ``ports``."""

    def __init__(
        self, procs: Processes, env: dict[str, str], tmp: Path, ports: list[int], *, isolate=True
    ) -> None:
        self.procs = procs
        self.env = env
        self.tmp = tmp
        self.ports = ports
        self.isolated = isolate and netns_available()
        self.hosts: dict[str, Host] = {}
        self.sockets = tmp / "relays"
        if self.isolated:
            self.sockets.mkdir(parents=True, exist_ok=True)
            for port in ports:  # this machine's side of each relay
                sock = self.sockets / f"{port}.sock"
                args = ["socat", f"UNIX-LISTEN:{sock},fork,unlink-early", f"TCP:127.0.0.1:{port}"]
                procs.start(f"relay-{port}", args, env, tmp)

    def start(self, name: str, **env: str) -> Host:
        """A worker of host ``name`` (a new process each call; the host's root kept)."""
        host = self.hosts.setdefault(name, Host(name, self.tmp / f"host-{name}"))
        host.root.mkdir(parents=True, exist_ok=True)
        full = {**self.env, "WORKER_HOST": name, "WORKSPACE_ROOT": str(host.root), **env}
        args = worker_args(name)
        if self.isolated:
            args = _in_namespace(args, self.ports, self.sockets)
        host.procs.append(self.procs.start(f"worker-{name}", args, full, self.tmp))
        return host

    def kill(self, name: str) -> None:
        """Host ``name`` lost: every process of it SIGKILLed (the worker, its children, its
        relays), then its disk deleted."""
        host = self.hosts[name]
        for proc in host.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        host.procs.clear()
        shutil.rmtree(host.root, ignore_errors=True)

    def close(self) -> None:
        """Every host's processes ended: the worker first (SIGTERM to it alone: its warm
        shutdown still needs PostgreSQL and Redis, which reach it through the relays of its
        process group), then the rest of its group (the relays)."""
        for host in self.hosts.values():
            for proc in host.procs:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
            for proc in host.procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(15)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def files(self, name: str, sid: str) -> dict[str, bytes]:
        """The files of session ``sid`` in host ``name``'s root (none: {})."""
        worktree = self.hosts[name].root / sid
        if not worktree.is_dir():
            return {}
        return {
            p.relative_to(worktree).as_posix(): p.read_bytes()
            for p in worktree.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(worktree).parts
        }
