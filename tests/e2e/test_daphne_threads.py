"""Daphne serving the shipped ASGI app starts no thread per request (core/request_threads.py):
a request's synchronous parts run on a kept thread. On the code before it, Daphne started a
thread for each of the 30 requests below."""

from __future__ import annotations

import os
import threading

import httpx
import pytest

pytestmark = pytest.mark.timeout(120)


def test_daphne_starts_no_thread_per_request(server):
    """Through the shipped ASGI app in Daphne: 30 API requests start no thread each. Daphne's
    threads are listed (by id) all the while, so a thread that lived for one request only is
    seen too."""
    procs = getattr(server, "procs", None)  # ServicesServer's processes
    daphne = [p for p, _ in procs.procs if "daphne" in str(p.args)] if procs else []
    if not daphne:
        pytest.skip("services mode only (Daphne)")
    tasks = f"/proc/{daphne[0].pid}/task"
    seen: set[str] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.update(os.listdir(tasks))

    headers = {"Authorization": "Token " + "0" * 40}  # nobody's: DRF's view answers 401
    with httpx.Client(base_url=server.url, timeout=30, headers=headers) as http:
        for _ in range(40):  # the loop executor's and the database pool's threads start
            assert http.get("/api/sessions/").status_code == 401
        before = set(os.listdir(tasks))
        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            for _ in range(30):
                assert http.get("/api/sessions/").status_code == 401
        finally:
            stop.set()
            watcher.join()
    started = seen - before
    assert len(started) <= 3, f"{len(started)} threads started for 30 requests"
