"""A running command's output is shown live even when the chat missed the event that said
it runs: found by a CI run of tests/e2e/test_browser_approvals.py, where the "running"
event went by while the chat read its path again. The read found the call pending
("running" is said live; the output is stored with it later), and the output that then came
was shown under a pending call, not as live output, until the command ended."""

from __future__ import annotations

import json
import re

import pytest

from .ui import login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(120)


def test_output_that_comes_after_a_missed_running_event_is_shown_live(page, server):
    dropped: list[dict] = []

    def without_running(ws) -> None:  # noqa: ANN001 - Playwright's WebSocketRoute
        server_side = ws.connect_to_server()

        def from_server(message: str | bytes) -> None:
            event = json.loads(message)
            part = event.get("part") or {}
            state = part.get("state") or {}
            if part.get("tool") == "shell" and state.get("status") == "running":
                dropped.append(part)  # the chat never hears that the call runs
                return
            ws.send(message)

        server_side.on_message(from_server)
        ws.on_message(server_side.send)

    page.route_web_socket(re.compile(r"/ws/sessions/"), without_running)
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
