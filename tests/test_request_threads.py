"""core/request_threads.py: a request's synchronous parts run on a thread kept from one
request to the next, not on one started for each (as Django's own per-request context does);
a waiting request gives its thread back while it waits; a thread still running a request's
view after its request left is not handed to another.

On the code before it, every request below ran on a thread of its own, and Daphne started a
thread for each of the 30 requests of the live test."""

from __future__ import annotations

import asyncio
import threading
import time

from asgiref.sync import sync_to_async

from core.request_threads import RequestThreads
from runs_app.waits import release_request_thread


def _http() -> dict:
    return {"type": "http", "method": "GET", "path": "/", "headers": []}


async def _nothing_received() -> dict:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _sent(_message: dict) -> None:
    return None


async def test_requests_one_after_another_run_on_one_kept_thread():
    seen: list[int] = []

    async def app(scope, receive, send):  # noqa: ANN001, ANN202
        # Thread-sensitive, as Django runs a sync view and the request's signal receivers.
        await sync_to_async(lambda: seen.append(threading.get_ident()))()
        await sync_to_async(lambda: seen.append(threading.get_ident()))()

    threads = RequestThreads(app, keep=4)
    for _ in range(5):
        await threads(_http(), _nothing_received, _sent)
    assert len(seen) == 10
    assert len(set(seen)) == 1, "one thread for the five requests, both calls of each"
    assert seen[0] != threading.get_ident()
    assert threads.idle_threads == 1


async def test_requests_at_once_each_have_their_own_thread_and_keep_is_a_bound():
    inside = asyncio.Event()
    entered: list[int] = []

    async def app(scope, receive, send):  # noqa: ANN001, ANN202
        await sync_to_async(lambda: entered.append(threading.get_ident()))()
        if len(entered) == 3:
            inside.set()
        await inside.wait()  # all three requests hold their threads at once

    threads = RequestThreads(app, keep=2)
    await asyncio.gather(*(threads(_http(), _nothing_received, _sent) for _ in range(3)))
    assert len(set(entered)) == 3, "requests at the same time never share a thread"
    assert threads.idle_threads == 2, "the third one given back is shut down"


async def test_a_thread_still_running_a_left_request_s_view_is_not_given_to_the_next():
    release = threading.Event()
    threads_seen: list[int] = []
    left: list[asyncio.Future] = []
    loop = asyncio.get_running_loop()
    entered = asyncio.Event()

    def slow_view() -> None:
        threads_seen.append(threading.get_ident())
        loop.call_soon_threadsafe(entered.set)
        release.wait(10)

    async def app(scope, receive, send):  # noqa: ANN001, ANN202
        if scope["path"] == "/left":
            # The client went away while the view ran: Django cancels the request's task,
            # the view's call goes on on its thread (as a shielded run view does).
            view = asyncio.ensure_future(sync_to_async(slow_view)())
            left.append(view)
            await asyncio.wait_for(entered.wait(), 10)
            return
        await sync_to_async(lambda: threads_seen.append(threading.get_ident()))()

    threads = RequestThreads(app, keep=4)
    await threads({**_http(), "path": "/left"}, _nothing_received, _sent)
    assert threads.idle_threads == 0, "its thread is busy: not kept"
    started = time.monotonic()
    await asyncio.wait_for(threads(_http(), _nothing_received, _sent), 5)
    assert time.monotonic() - started < 2, "the next request did not wait behind the view"
    assert threads_seen[1] != threads_seen[0]
    release.set()
    await asyncio.wait_for(left[0], 5)  # the left view ends on its own thread


async def test_a_waiting_request_gives_its_thread_back_until_its_next_call():
    waiting = asyncio.Event()
    done_waiting = asyncio.Event()
    seen: list[int] = []

    async def app(scope, receive, send):  # noqa: ANN001, ANN202
        if scope["path"] == "/wait":
            await sync_to_async(lambda: seen.append(threading.get_ident()))()
            release_request_thread()  # as a ``wait: true`` request or a stream does
            waiting.set()
            await done_waiting.wait()
            await sync_to_async(lambda: seen.append(threading.get_ident()))()  # the answer
            return
        await sync_to_async(lambda: seen.append(threading.get_ident()))()

    threads = RequestThreads(app, keep=4)
    waiter = asyncio.ensure_future(threads({**_http(), "path": "/wait"}, _nothing_received, _sent))
    await waiting.wait()
    assert threads.idle_threads == 1, "given back while it waits"
    await threads(_http(), _nothing_received, _sent)
    assert seen[1] == seen[0], "another request ran on the waiting one's thread meanwhile"
    done_waiting.set()
    await waiter
    assert len(seen) == 3 and threads.idle_threads == 1


async def test_a_request_without_a_synchronous_part_takes_no_thread():
    async def app(scope, receive, send):  # noqa: ANN001, ANN202
        await asyncio.sleep(0)  # scenario: an await, but nothing synchronous (no time passes)

    threads = RequestThreads(app)
    await threads(_http(), _nothing_received, _sent)
    assert threads.idle_threads == 0


async def test_sockets_and_lifespan_pass_through():
    calls: list[str] = []

    async def app(scope, receive, send):  # noqa: ANN001, ANN202
        calls.append(scope["type"])

    threads = RequestThreads(app)
    await threads({"type": "websocket"}, _nothing_received, _sent)
    assert calls == ["websocket"] and threads.idle_threads == 0
