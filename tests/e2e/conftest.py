from __future__ import annotations

import os
import shutil
import time
from collections import deque

import pytest

from . import shared
from .stack import Processes

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def _no_browser(reason: str) -> None:
    if os.environ.get("REQUIRE_BROWSER") == "1":
        pytest.fail(f"REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # noqa: ANN001, ANN201 - pytest's hook
    """Keeps each phase's report on the test, for the fixtures' teardown to read."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


@pytest.fixture(scope="module")  # not longer: Playwright's loop would stay in the thread
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _no_browser("the playwright package is not installed")
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        _no_browser(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def server(request):
    """The live server of the browser tests (shared.py): services mode when the suite has
    PostgreSQL and Redis, as in CI; embedded mode otherwise. A file that changes what other
    files would see (a deployment-wide limit, a user of a fixed name, seeded history, a
    restarted server) says ``OWN_SERVER = True`` and gets one of its own; the others share
    their process's."""
    if not getattr(request.module, "OWN_SERVER", False):
        yield shared.shared(shared.default_mode())
        return
    srv, tmp = shared.start(shared.default_mode())
    yield srv
    shared.stop(srv, tmp)


@pytest.fixture(scope="module")
def embedded_server():
    """Embedded mode (SQLite, in-process runs): what ``./dev serve`` runs; shared as
    ``server`` is."""
    return shared.shared("embedded")


@pytest.fixture
def page(browser, request):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(20_000)
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    failed: list[str] = []
    marker = request.node.get_closest_marker("allow_status")
    expected = set(marker.args) if marker else set()
    page.on(
        "response",
        lambda r: (
            failed.append(f"{r.status} {r.request.method} {r.url}")
            if r.status >= 400 and r.status not in expected and not r.url.endswith("/favicon.ico")
            else None
        ),
    )
    trace = _trace(page)
    yield page
    # "Failed to load resource" console lines are judged through the responses themselves.
    # A test that stops the server on purpose (``@pytest.mark.server_restarts``) sees the
    # browser's own report of the refused reconnects; anything else is still an error.
    restarts = request.node.get_closest_marker("server_restarts") is not None
    errors = [
        c
        for c in console
        if c.startswith(("error", "pageerror"))
        and "Failed to load resource" not in c
        and not (restarts and "WebSocket connection to" in c and "ERR_CONNECTION_REFUSED" in c)
    ]
    context.close()
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        # What the server said while the test failed (CI shows a failure once, not again).
        for name in ("server", "embedded_server"):
            if name in request.fixturenames:
                print(request.getfixturevalue(name).logs())
        # And what the page asked for and heard, in order (a flake says where it stood).
        print("the page's last requests and socket frames:\n" + "\n".join(trace))
    assert not errors, "browser console errors:\n" + "\n".join(errors)
    assert not failed, "failed requests:\n" + "\n".join(failed)


def _trace(page) -> deque[str]:  # noqa: ANN001 - a Playwright page
    """The page's requests, their ends and the frames its sockets received: the last 200,
    stamped in seconds from the start of the test."""
    lines: deque[str] = deque(maxlen=200)
    start = time.monotonic()

    def add(text: str) -> None:
        lines.append(f"{time.monotonic() - start:8.3f} {text}")

    page.on("request", lambda r: add(f"> {r.method} {r.url}"))
    page.on("requestfinished", lambda r: add(f"< {r.method} {r.url}"))
    page.on("requestfailed", lambda r: add(f"! {r.method} {r.url} {r.failure}"))
    page.on(
        "websocket",
        lambda ws: (
            add(f"socket {ws.url}"),
            ws.on("framereceived", lambda f: add(f"ws {str(f)[:200]}")),
            ws.on("close", lambda _ws: add("socket closed")),
        ),
    )
    return lines


@pytest.fixture
def procs():
    """Subprocesses (Daphne, Celery workers) stopped at the end of the test."""
    processes = Processes()
    yield processes
    processes.stop()
