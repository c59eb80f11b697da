"""The host's threads: what a run does that blocks (database statements, git, file tools)
runs here, never on the loop the runs share.

* ``db``: ``RUN_DB_THREADS`` threads, each with its own database connection, so a process
  holds that many connections whatever the number of runs;
* ``renewer``: one thread of the lease keeper's own (``keeper.py``), with its own connection,
  that nothing else uses: a slow git or a burst of checkpoints cannot delay a renewal;
* ``tools``: ``RUN_TOOL_THREADS`` threads for the file and shell tools.

A call whose connection broke closes it there, so that thread's next call opens a new one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

T = TypeVar("T")


class Threads:
    """The three pools of one process's run host (made again in a forked child)."""

    def __init__(self) -> None:
        self.db = concurrent.futures.ThreadPoolExecutor(
            max_workers=settings.RUN_DB_THREADS, thread_name_prefix="run-db"
        )
        # The keeper's own thread: nothing a run does can occupy it (its connection is one
        # more per process).
        self.renewer = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="lease-renewer"
        )
        self.tools = concurrent.futures.ThreadPoolExecutor(
            max_workers=settings.RUN_TOOL_THREADS, thread_name_prefix="run-tool"
        )

    async def blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """(On the loop.) ``fn(*args, **kwargs)`` in a database thread."""
        return await _run_in(self.db, fn, args, kwargs)

    async def in_tool_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await _run_in(self.tools, fn, args, {})

    async def on_renewer(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the keeper's own thread."""
        return await _run_in(self.renewer, fn, args, {})

    def close_connections(self) -> None:
        """Close the database connection of every database thread (an idle host; the end of
        a test session, whose database is then dropped). Blocks; not for the loop."""
        count = settings.RUN_DB_THREADS
        concurrent.futures.wait([self.renewer.submit(connection.close)], timeout=15)
        barrier = threading.Barrier(count)

        def close() -> None:
            # Each thread takes one of these (the barrier holds it until all have), so every
            # thread's own connection is closed.
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=5)
            connection.close()

        concurrent.futures.wait([self.db.submit(close) for _ in range(count)], timeout=15)


async def _run_in(
    pool: concurrent.futures.ThreadPoolExecutor, fn: Callable[..., T], args: tuple, kwargs: dict
) -> T:
    return await asyncio.get_running_loop().run_in_executor(
        pool, functools.partial(_in_db_thread, fn, args, kwargs)
    )


def _in_db_thread(fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
    try:
        return fn(*args, **kwargs)
    except DatabaseError:
        # The connection may be broken (a restart, a killed backend): open a new one next.
        close_old_connections()
        connection.close()
        raise
