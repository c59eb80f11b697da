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
are enforced here; ``Undo`` puts back the worktree of a command that went over them. The
special files a command leaves in the worktree (sockets; FIFOs where seccomp is missing) are
removed when it ends: the server's git would open a FIFO named as a nested ``.git/HEAD``
and wait on it.

What the host lacks is said once in the log and by ``limitations()``: without a user
namespace the command runs as the server's user; without seccomp it can reach the kernel
keyring and the calls listed above (the namespaces still confine it); without a writable
memory cgroup its memory is bounded per process only (the address-space rlimit).

Stopping: the command runs in a session (process group) of its own; ``kill()`` SIGKILLs that
group, which is ``bwrap`` itself; ``--die-with-parent`` then kills the namespace's first
process, and with it the kernel kills every process of the namespace, double-forked daemons
included. The cgroup, where there is one, is emptied as well.

The parts: ``sandbox_args`` (the command line: mounts, namespaces, rlimits), ``seccomp`` (the
filter), ``sandbox_cgroups`` (the per-command cgroups), ``sandbox_probe`` (what this host's
sandbox can do), ``worktree_usage`` (the worktree's size) and ``worktree_undo`` (putting it
back). Here: whether the shell may run, and running one command.
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from . import change_journal, kept_usage, layers
from .sandbox_args import argv, seccomp_fd
from .sandbox_cgroups import Cgroup
from .sandbox_probe import Host, probe
from .worktree_usage import own_copies, remove_special, usage, worktree_usage

KILL_CHECK_SECONDS = 0.05
SIZE_CHECK_SECONDS = 0.5
log = logging.getLogger(__name__)


class Unavailable(Exception):
    """The sandbox cannot start here; the message says why."""


@dataclass
class Outcome:
    exit_code: int | None  # None: killed (stopped, timed out, over a limit)
    output: str
    truncated: bool
    stopped: str = ""  # "", "stopped", "timeout", "worktree-size", "memory"
    removed: list[str] = field(default_factory=list)  # special files taken out after it
    layered: bool = False  # it wrote into a layer: when stopped, nothing reached the worktree


# -- availability -------------------------------------------------------------------------------
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
    reason = probe(bwrap).reason
    return f"The shell tool is disabled: {reason}" if reason else ""


def limitations() -> list[str]:
    """What the sandbox cannot do on this host, in sentences ([] when it has every part;
    logged once when first found out). Only meaningful when ``unavailable_reason()`` is ''."""
    if settings.AGENT_SHELL_SANDBOX == "off":
        return ["AGENT_SHELL_SANDBOX=off: shell commands run unconfined, with rlimits only."]
    bwrap = shutil.which("bwrap")
    lost = list(probe(bwrap).lost) if bwrap else []
    reason = overlay_reason(Path(settings.WORKSPACE_ROOT)) if bwrap else ""
    if reason and settings.AGENT_SHELL_OVERLAY != "off":
        lost.append(
            f"No overlay layer for shell commands ({reason}): each writes into the worktree "
            "itself, an undo point taken before it (a walk of the worktree), and a session "
            "fork copies its files instead of sharing them."
        )
    return lost


# -- running one command ------------------------------------------------------------------------
async def run(
    worktree: Path,
    command: str,
    *,
    on_output: Callable[[str], Awaitable[None]],
    should_stop: Callable[[], bool],
    tree_limit: int | None = None,
    may_write: Callable[[], bool] = lambda: True,
) -> Outcome:
    """Run ``command`` in the sandbox, handing its output (stdout and stderr, in the order
    they come) to ``on_output`` as it arrives, until it exits, ``should_stop()`` turns true,
    its time is up, the worktree outgrows its limits (``tree_limit``, default
    ``WORKTREE_MAX_BYTES``, 0: none; ``WORKTREE_MAX_ENTRIES``) or the memory bound kills one
    of its processes; then no process of it is left. Over a layer (``layers``), what it wrote
    is merged into the worktree when it ends by itself and ``may_write()`` (the run still
    holds its lease) says so just before, and dropped otherwise."""
    layer = await asyncio.to_thread(_new_layer, worktree)
    tree_limit, entry_limit, base = await _worktree_limits(worktree, tree_limit)
    started = time.monotonic()
    cgroup = await asyncio.to_thread(Cgroup)
    proc = await _start(worktree, command, cgroup, layer)
    output = _Output(on_output)
    bounds = _Bounds(
        worktree,
        cgroup,
        should_stop,
        tree_limit=tree_limit,
        entry_limit=entry_limit,
        deadline=started + settings.AGENT_SHELL_TIMEOUT,
        next_size_check=started + SIZE_CHECK_SECONDS,
        layer=layer,
        base=base,
    )
    stopped, pumped = "", False
    try:
        stopped = await _pump(proc, output, bounds)
        pumped = True
    finally:
        code = await _end(proc, cgroup, kill=bool(stopped) or proc.returncode is None)
        if layer is not None and (not pumped or stopped or code is None):
            # Stopped, killed, or the run's task cancelled under it: nothing of it is kept.
            await asyncio.to_thread(layer.drop)
    if layer is not None and not stopped and code is not None and not may_write():
        # The run lost its lease while the command ran: another worker may own the worktree.
        await asyncio.to_thread(layer.drop)
        stopped = "stopped"
    removed = await _settle(worktree, layer, bounds, stopped, code)
    if removed is None:
        stopped, removed = "worktree-size", []
    await output.finish()
    return Outcome(
        exit_code=None if stopped else code,
        output="".join(output.kept),
        truncated=output.truncated,
        stopped=stopped,
        removed=removed,
        layered=layer is not None,
    )


async def _settle(
    worktree: Path, layer: layers.Layer | None, bounds: _Bounds, stopped: str, code: int | None
) -> list[str] | None:
    """After the command: the special files taken out (None: it went past the worktree's
    limits in its last half second, and was undone over a layer). Over a layer that ended by
    itself, the merge; without one, the walk that finds what it left."""
    if layer is not None:
        if stopped or code is None:
            return []
        return await asyncio.to_thread(_merge, worktree, layer, bounds)
    change_journal.forget(worktree)  # written in place: the next snapshot walks
    if stopped == "worktree-size":
        kept_usage.forget(worktree)
        return []
    size, entries, special = await asyncio.to_thread(usage, worktree)
    if not stopped and bounds.over(size, entries):
        kept_usage.forget(worktree)  # its caller may put the worktree back
        return None
    kept_usage.write(worktree, (size, entries))
    return await asyncio.to_thread(remove_special, worktree, special) if special else []


def _merge(worktree: Path, layer: layers.Layer, bounds: _Bounds) -> list[str] | None:
    """A layer that ended by itself: dropped past the worktree's limits (None), else merged
    and what it added kept (``kept_usage``); the entries it would not move: returned."""
    added = layer.usage()
    if bounds.over(bounds.base[0] + added.bytes, bounds.base[1] + added.entries):
        layer.drop()
        return None
    merged = layer.merge()  # its paths told to the journal
    kept_usage.add(worktree, added.bytes, added.entries - len(merged.removed))
    return merged.removed


async def _worktree_limits(
    worktree: Path, tree_limit: int | None
) -> tuple[int, int, tuple[int, int]]:
    """The bytes and entries the worktree may hold while the command runs (0: no bound), and
    what it holds before it."""
    tree_limit = settings.WORKTREE_MAX_BYTES if tree_limit is None else tree_limit
    entry_limit = settings.WORKTREE_MAX_ENTRIES
    base = (0, 0)
    if tree_limit or entry_limit:
        # A worktree already over a limit (a quota lowered) may shrink, never grow.
        base = await asyncio.to_thread(kept_usage.known, worktree)
        tree_limit = tree_limit and max(tree_limit, base[0])
        entry_limit = entry_limit and max(entry_limit, base[1])
    return tree_limit, entry_limit, base


def workspaces(root: Path) -> str:
    """How worktrees beneath ``root`` are written and forked here (issue 43), in words:
    copy-on-write where a shell command's overlay layer can be mounted, full copies where it
    cannot (and why)."""
    reason = overlay_reason(root)
    if not reason:
        return "copy-on-write: each shell command writes into a layer; forks share files"
    return f"full copies ({reason}): each shell command writes into the worktree; forks copy"


def uses_layers(worktree: Path) -> bool:
    """Whether a command in ``worktree`` runs over a layer of its own (``layers``)."""
    return overlay_reason(worktree.parent) == ""


def overlay_reason(root: Path) -> str:
    """Why commands beneath ``root`` cannot run over a layer ('' when they can)."""
    if settings.AGENT_SHELL_OVERLAY == "off":
        return "AGENT_SHELL_OVERLAY=off"
    if settings.AGENT_SHELL_SANDBOX == "off":
        return "AGENT_SHELL_SANDBOX=off"
    host = _host()
    if host is None or host.reason or not host.user:
        return "no user namespace for the sandbox"
    reason = layers.unavailable_reason(shutil.which("bwrap") or "bwrap", root)
    if reason:
        _say_once(reason)
    return reason


@functools.cache
def _say_once(reason: str) -> None:
    log.warning("shell overlay: %s; commands write into the worktree, an undo point each", reason)


def _new_layer(worktree: Path) -> layers.Layer | None:
    """A layer for the next command; None: it writes into the worktree, whose files shared
    with another worktree (a fork made while layers were on) get copies of their own first."""
    if overlay_reason(worktree.parent):
        own_copies(worktree)
        return None
    return layers.Layer.create(worktree)


def _host() -> Host | None:
    """This host's sandbox (None: unconfined, ``AGENT_SHELL_SANDBOX=off``)."""
    if settings.AGENT_SHELL_SANDBOX == "off":
        return None
    return probe(shutil.which("bwrap") or "bwrap")


async def _start(
    worktree: Path, command: str, cgroup: Cgroup, layer: layers.Layer | None
) -> asyncio.subprocess.Process:
    """The command started in its cgroups, in a session (process group) of its own, its
    output (stdout and stderr together) on a pipe; the cgroups removed if it cannot start."""
    host = _host()
    program = host.seccomp if host is not None else b""
    filter_fd = seccomp_fd(program) if program else None
    user = host is not None and host.user
    try:
        return await asyncio.create_subprocess_exec(
            *cgroup.wrap(
                argv(
                    layer.merged if layer else worktree,
                    command,
                    user=user,
                    seccomp_fd=filter_fd,
                    overlay=layer.wrap if layer else None,
                )
            ),
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


class _Output:
    """The command's output as it comes: decoded (UTF-8, bad bytes replaced), handed on and
    kept up to ``AGENT_SHELL_OUTPUT_MAX`` characters; past that, ``truncated`` and dropped."""

    def __init__(self, on_output: Callable[[str], Awaitable[None]]) -> None:
        self.on_output = on_output
        self.keep = settings.AGENT_SHELL_OUTPUT_MAX
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.kept: list[str] = []
        self.kept_len = 0
        self.truncated = False

    async def add(self, chunk: bytes) -> None:
        text = self.decoder.decode(chunk)
        if text and not self.truncated:
            room = self.keep - self.kept_len
            if len(text) > room:
                text, self.truncated = text[:room], True
            if text:
                self.kept.append(text)
                self.kept_len += len(text)
                await self.on_output(text)

    async def finish(self) -> None:
        """What the decoder still holds (an incomplete character at the very end)."""
        tail = self.decoder.decode(b"", final=True)
        if tail and not self.truncated and self.kept_len + len(tail) <= self.keep:
            self.kept.append(tail)
            await self.on_output(tail)


@dataclass
class _Bounds:
    """What ends a running command before it exits, checked every ``KILL_CHECK_SECONDS``:
    a stop, the wall time, the memory bound, and (every ``SIZE_CHECK_SECONDS``) the
    worktree's limits (0: none)."""

    worktree: Path
    cgroup: Cgroup
    should_stop: Callable[[], bool]
    tree_limit: int
    entry_limit: int
    deadline: float
    next_size_check: float
    layer: layers.Layer | None = None
    base: tuple[int, int] = (0, 0)  # the worktree's bytes and entries before the command

    @property
    def watches_worktree(self) -> bool:
        return bool(self.tree_limit or self.entry_limit)

    async def passed(self) -> str:
        """Why the command must end now ('' : it may go on): an ``Outcome.stopped``."""
        now = time.monotonic()
        if self.should_stop():
            return "stopped"
        if now >= self.deadline:
            return "timeout"
        if self.cgroup.oom_kills():
            return "memory"
        if self.watches_worktree and now >= self.next_size_check:
            self.next_size_check = now + SIZE_CHECK_SECONDS
            if await self.over_worktree_limits():
                return "worktree-size"
        return ""

    async def over_worktree_limits(self) -> bool:
        if self.layer is None:
            return self.over(*await asyncio.to_thread(worktree_usage, self.worktree))
        added = await asyncio.to_thread(self.layer.usage)
        return self.over(self.base[0] + added.bytes, self.base[1] + added.entries)

    def over(self, size: int, entries: int) -> bool:
        tree, entry = self.tree_limit, self.entry_limit
        return bool((tree and size > tree) or (entry and entries > entry))


async def _pump(proc: asyncio.subprocess.Process, output: _Output, bounds: _Bounds) -> str:
    """Hand the command's output on until it closes it ('' : it ended by itself, or
    "memory": one of its processes was killed by the memory bound) or a bound is passed
    (its ``Outcome.stopped``)."""
    assert proc.stdout is not None
    reader = asyncio.ensure_future(proc.stdout.read(65536))
    try:
        while True:
            done, _ = await asyncio.wait({reader}, timeout=KILL_CHECK_SECONDS)
            if done:
                chunk = reader.result()
                if not chunk:
                    break
                await output.add(chunk)
                reader = asyncio.ensure_future(proc.stdout.read(65536))
            if stopped := await bounds.passed():
                return stopped
        # It ended, but one of its processes was killed.
        return "memory" if bounds.cgroup.oom_kills() else ""
    finally:
        if not reader.done():
            reader.cancel()


async def _end(proc: asyncio.subprocess.Process, cgroup: Cgroup, *, kill: bool) -> int | None:
    """No process of the command left (its group killed when ``kill``, its cgroups emptied
    and removed); its exit code (None: it did not end within 5 s)."""
    if kill:
        _kill_group(proc.pid)
    try:
        code = await asyncio.wait_for(proc.wait(), 5)
    except TimeoutError:
        code = None
    await asyncio.to_thread(cgroup.remove)
    return code


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
