"""A git process's stdout handed on as git writes it (``Snapshots.stream``; the process is
started by the one runner, ``Snapshots._run``): chunks of at most 64 KiB, its stderr read
alongside so that neither pipe fills. Git silent for ``limit`` seconds is killed, as is one
whose iterator is closed or dropped; a non-zero exit, after the output, is the error
``failure`` makes of git's message."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
from collections.abc import Callable, Iterator


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
