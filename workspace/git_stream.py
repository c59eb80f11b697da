"""A git process's output, for the one runner (``Snapshots._run``, which starts it).

``collect``: all of it, git killed (its whole process group) past ``limit`` seconds. A timer
kills it, not ``communicate(timeout=)``: Python waits for a process with a timeout by polling
with sleeps that double (0.5 ms, 1 ms, 2 ms…), which cost each git call a few milliseconds
after it had already exited (a step's snapshot makes five).

``output``: stdout handed on as git writes it (``Snapshots.stream``): chunks of at most
64 KiB, its stderr read alongside so that neither pipe fills. Git silent for ``limit``
seconds is killed, as is one whose iterator is closed or dropped; a non-zero exit, after the
output, is the error ``failure`` makes of git's message."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence

# Commands that read objects alone: run against an index file that does not exist (an empty
# index). Git reads the index whenever there is one, diff-tree and ls-tree included: 3.4 MB
# at 50,000 files, 10-15 ms of every call (issue 43).
OBJECTS_ONLY = frozenset(
    {"diff-tree", "ls-tree", "cat-file", "merge-tree", "rev-list", "blame", "archive",
     "format-patch", "log", "show", "commit-tree", "mktree", "for-each-ref"}
)  # fmt: skip


def objects_only(args: Sequence[str]) -> bool:
    """Whether ``args`` (git's, after its global options) run a command of ``OBJECTS_ONLY``."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        rest = rest[2:] if rest[0] == "-c" else rest[1:]
    return bool(rest) and rest[0] in OBJECTS_ONLY


def collect(
    proc: subprocess.Popen, input: bytes | None, limit: float
) -> tuple[bytes, bytes] | None:
    """Git's (stdout, stderr) once it exited; None when it was killed at ``limit``."""
    fired = threading.Event()

    def kill() -> None:
        fired.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    timer = threading.Timer(limit, kill)
    timer.daemon = True
    timer.start()
    try:
        out, err = proc.communicate(input)
    except BaseException:
        kill()
        raise
    finally:
        timer.cancel()
    return None if fired.is_set() else (out, err)


def output(
    proc: subprocess.Popen,
    what: str,
    limit: float,
    failure: Callable[[str, str], Exception],
) -> Iterator[bytes]:
    """The chunks of ``proc``'s stdout. The first ``next`` yields ``b""`` (the runner takes
    it): from there the process is the iterator's."""
    err = b""
    with proc, selectors.DefaultSelector() as pipes:
        try:
            yield b""
            pipes.register(proc.stdout, selectors.EVENT_READ)
            pipes.register(proc.stderr, selectors.EVENT_READ)
            while pipes.get_map():
                if not (ready := pipes.select(limit)):
                    raise failure(what, f"no answer after {limit:g}s")
                for key, _ in ready:
                    if not (data := os.read(key.fd, 1 << 16)):
                        pipes.unregister(key.fileobj)
                    elif key.fileobj is proc.stdout:
                        yield data
                    else:
                        err = (err + data)[:65536]
            code = proc.wait(limit)
        except BaseException as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            if isinstance(exc, subprocess.TimeoutExpired):
                raise failure(what, f"no answer after {limit:g}s") from None
            raise
    message = err.decode(errors="replace").strip()
    if code != 0:
        raise failure(what, message or f"exit code {code}")
