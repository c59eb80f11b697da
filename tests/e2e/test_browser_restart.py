"""Faults (issue 7): a server process dies and comes back while a reply streams into an open
chat. The browser reconnects and catches up: the text it shows only ever grows as a prefix
of the answer (no gap, no duplicate) and ends as the whole answer, once."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from .stack import ServicesServer, services_available
from .ui import login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(240)
OWN_SERVER = True  # its web server restarted (conftest.py: not the shared server)

WORDS = 80


def stream_through(page, server, fault: Callable[[], None]) -> None:
    login(page, server)
    new_session(page)
    expected = " ".join(f"w{i}" for i in range(1, WORDS + 1))
    send(page, f"pace 60\nsay {expected}")
    message_id = page.wait_for_function(
        """() => {
          const all = document.querySelectorAll('#messages .msg.assistant');
          const last = all[all.length - 1];
          const t = last && last.querySelector('.text');
          return t && t.textContent.split(' ').length >= 5 ? last.dataset.messageId : null;
        }"""
    ).json_value()
    page.evaluate(
        """(id) => {
          window.__samples = [];
          window.__sampler = setInterval(() => {
            const t = document.querySelector(`[data-message-id="${id}"] .text`);
            const v = t ? t.textContent : null;
            if (v !== window.__samples[window.__samples.length - 1]) window.__samples.push(v);
          }, 10);
        }""",
        message_id,
    )
    fault()
    wait_idle(page, timeout=60_000)
    page.wait_for_function(
        '([id, text]) => document.querySelector(`[data-message-id="${id}"] .text`)'
        "?.textContent === text",
        arg=[message_id, expected],
        timeout=30_000,
    )
    samples = page.evaluate("() => { clearInterval(window.__sampler); return window.__samples; }")
    bad = [s for s in samples if s is not None and not expected.startswith(s)]
    assert not bad, f"text shown that is not a prefix of the answer: {bad[:3]}"
    assert any(s and s != expected for s in samples), "the fault did not land mid-stream"
    assert page.locator(f'[data-message-id="{message_id}"] .text').count() == 1


@pytest.mark.server_restarts
def test_a_daphne_restart_mid_stream_loses_and_doubles_nothing(page, server):
    if not isinstance(server, ServicesServer):
        assert not services_available()
        pytest.skip("needs services mode (Daphne apart from the worker)")

    def restart() -> None:
        started = time.monotonic()
        server.restart_daphne()
        assert time.monotonic() - started < 15

    stream_through(page, server, restart)


def test_a_redis_restart_mid_stream_loses_and_doubles_nothing(browser, tmp_path):
    """Redis (broker, channel layer, abort bus) SIGKILLed and started again, empty: the run
    completes (its lock lives in PostgreSQL) and the open chat catches up."""
    if not services_available():
        pytest.skip("needs services mode")
    srv = ServicesServer(tmp_path / "srv", private_redis=True).start()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        stream_through(page, srv, srv.restart_redis)
    except Exception:
        print(srv.logs())
        page.screenshot(path=str(tmp_path / "redis-restart-failure.png"), full_page=True)
        raise
    finally:
        context.close()
        srv.stop()
