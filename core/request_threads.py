"""The threads that run the requests' synchronous parts, kept from one request to the next.

Django runs a request's synchronous work (its API views, its signals' receivers) on a thread
of the request's own (asgiref's ``ThreadSensitiveContext``, entered for each request): a
thread started for every request and ended after it, about a quarter of a millisecond of the
web process's CPU each time, with every cache a library keeps per thread (Celery's producer
id, for one) built anew. asgiref lets the caller own that thread
(``ThreadSensitiveContext(executor=…)``: "you may use it again for a later block, for example
in a pool"). ``RequestThreads`` is that pool, as ASGI middleware: each request's context gets
a ``Lease``, which takes an idle thread at the request's first synchronous call (or starts
one) and gives it back when the request ends — or earlier, when the request goes on to wait
for minutes (``release``: ``runs_app.waits``); a later call takes one again.

A thread is given back only with no work left on it: a request whose client went away while
its view ran leaves that view running, and its thread is shut down once the view returns, so
no later request waits behind it. At most ``keep`` threads wait idle; one given back beyond
them is shut down. Each request still has its thread to itself while it holds it: the
database connection of its context, its transaction, a view's thread-locals.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable[..., Any], Callable[..., Any]], Awaitable[None]]

# The lease of the request being served: its tasks (Django's, a stream's) inherit it.
_current: contextvars.ContextVar[Lease | None] = contextvars.ContextVar(
    "request_thread_lease", default=None
)


class _Thread(ThreadPoolExecutor):
    """One thread, and how many calls submitted to it have not finished."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="request")
        self._guard = threading.Lock()
        self._unfinished = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        with self._guard:
            self._unfinished += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _future: Future) -> None:
        with self._guard:
            self._unfinished -= 1

    @property
    def idle(self) -> bool:
        with self._guard:
            return self._unfinished == 0


class Lease(Executor):
    """A request's executor: a kept thread from the first call to ``release``."""

    def __init__(self, pool: RequestThreads) -> None:
        self._pool = pool
        self._thread: _Thread | None = None

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        if self._thread is None:
            self._thread = self._pool.take()
        return self._thread.submit(fn, *args, **kwargs)

    def release(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._pool.give_back(thread)


class RequestThreads:
    """Each HTTP request's thread-sensitive work on a kept thread. Threads are taken and given
    back on the server's loop only (no lock needed for the idle list)."""

    def __init__(self, app: ASGIApp, *, keep: int = 32) -> None:
        self.app = app
        self.keep = keep
        self._idle: list[_Thread] = []

    async def __call__(self, scope: Scope, receive: Callable[..., Any], send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        lease = Lease(self)
        token = _current.set(lease)
        try:
            async with ThreadSensitiveContext(executor=lease):
                await self.app(scope, receive, send)
        finally:
            _current.reset(token)
            lease.release()

    def take(self) -> _Thread:
        try:
            return self._idle.pop()
        except IndexError:
            return _Thread()

    def give_back(self, thread: _Thread) -> None:
        if thread.idle and len(self._idle) < self.keep:
            self._idle.append(thread)
        else:
            thread.shutdown(wait=False)  # its thread ends when its last call returns

    @property
    def idle_threads(self) -> int:
        return len(self._idle)


def current_lease() -> Lease | None:
    """The lease of the request this runs for, if ``RequestThreads`` serves it."""
    return _current.get()
