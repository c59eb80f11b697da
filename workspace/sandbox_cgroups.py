"""One shell command's cgroups: where this host lets them be made (v1 or v2; beneath the
server's own cgroup when it may, so the service's own limits still hold, else at the
hierarchy's top), and for each command a cgroup per hierarchy that caps its processes
(``pids``) and the memory of all of them together (``memory``, no swap), counts the
out-of-memory kills and is emptied and removed when the command ends. A controller that
cannot be written here is missing from ``cgroup_roots()``: rlimits alone bound it then."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

log = logging.getLogger(__name__)

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
def cgroup_roots() -> dict[str, Path]:
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


class Cgroup:
    """One command's cgroups (one per v1 hierarchy, one in v2): its processes and the
    memory of all of them together bounded."""

    def __init__(self) -> None:
        self.paths: list[Path] = []
        self.memory: Path | None = None
        name = uuid.uuid4().hex
        for controller, root in cgroup_roots().items():
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
