"""A running command's output is shown live even when the chat missed the event that said
it runs: found by a CI run of tests/e2e/test_browser_approvals.py, where the "running"
event went by while the chat read its path again. The read found the call pending
("running" is said live; the output is stored with it later), and the output that then came
was shown under a pending call, not as live output, until the command ended."""

from __future__ import annotations

import pytest

from .ui import filter_session_events, login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(120)


def test_output_that_comes_after_a_missed_running_event_is_shown_live(page, server):
    dropped: list[dict] = []

    def keep(event: dict) -> bool:
        part = event.get("part") or {}
        running = (part.get("state") or {}).get("status") == "running"
        if part.get("tool") == "shell" and running:
            dropped.append(part)  # the chat never hears that the call runs
            return False
        return True

    filter_session_events(page, keep)
    login(page, server)
    new_session(page)
    send(page, "shell for i in 1 2 3 4 5; do echo line$i; sleep 0.6; done")
    page.wait_for_function(
        "() => { const o = document.querySelector('#messages details.tool pre.output.live');"
        " return o && o.textContent.includes('line2'); }",
        timeout=20_000,
    )
    assert "line5" not in page.locator("#messages pre.output.live").inner_text()
    wait_idle(page)
    assert dropped, "no running event was seen to drop"
    done = page.locator("#messages details.tool").last
    assert "line5" in done.locator("pre.output").text_content()
    assert page.locator("#messages pre.output.live").count() == 0
