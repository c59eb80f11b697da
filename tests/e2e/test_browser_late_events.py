"""Events that reach the chat later than the state they describe (found as CI flakes: two
processes publish a session's events, and a reply to the tab's own request can overtake an
event sent before it). The socket goes through Playwright, which holds a frame back and lets
it go when the test says; the chat must then keep what it knows to be newer."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from .ui import (
    BADGE_IDLE,
    LAST_ASSISTANT_TEXT,
    login,
    new_session,
    prompt_back,
    send,
    wait_idle,
)

pytestmark = pytest.mark.timeout(180)

# The page's sockets count each frame once its handlers have run (the chat handles a frame
# synchronously in ``onmessage``; a task queued from a listener runs after all of them).
COUNT_HANDLED = """
(() => {
  const Native = window.WebSocket;
  window.__framesHandled = 0;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener("message", () => setTimeout(() => { window.__framesHandled += 1; }));
    }
  };
})();
"""


class HeldBack:
    """The session's socket, with the server's frames that ``hold`` picks kept from the page
    until ``release``; every other frame passes. ``passed`` lists the events let through.
    Events are numbered again in the order the page gets them (``seq``, ``prev``), as the
    server numbers them when it sends them: a late event is then no gap the chat could see.
    ``handled`` waits until the page has handled every frame sent to it (its socket counts
    them once their handlers ran)."""

    def __init__(self, page) -> None:  # noqa: ANN001
        self.hold: Callable[[dict], bool] = lambda event: False
        self.held: list[str] = []
        self.passed: list[dict] = []
        self.page = page
        self.route = None
        self.last_seq: int | None = None
        self.sent = 0
        self.releasing = False
        page.add_init_script(COUNT_HANDLED)
        page.route_web_socket("**/ws/sessions/**", self._routed)

    def _routed(self, route) -> None:  # noqa: ANN001
        self.route = route
        server = route.connect_to_server()
        server.on_message(lambda frame: self._from_server(route, frame))

    def _from_server(self, route, frame: str) -> None:  # noqa: ANN001
        event = json.loads(frame)
        if self.releasing or self.hold(event):
            # While the held frames go out, one that comes goes after them: the page gets
            # them in the order the server sent them.
            self.held.append(frame)
            return
        self.passed.append(event)
        self._send(route, event)

    def _send(self, route, event: dict) -> None:  # noqa: ANN001
        if "seq" in event and self.last_seq is not None:
            event = {**event, "prev": self.last_seq, "seq": self.last_seq + 1}
        if "seq" in event:
            self.last_seq = event["seq"]
        self.sent += 1
        route.send(json.dumps(event))

    def wait_for(self, what: Callable[[dict], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not any(what(e) for e in self.passed):
            assert time.monotonic() < deadline, "the event never came"
            self.page.wait_for_timeout(50)

    def release(self) -> None:
        assert self.held, "nothing was held back"
        self.hold = lambda event: False
        self.releasing = True
        try:
            while self.held:
                self._send(self.route, json.loads(self.held.pop(0)))
        finally:
            self.releasing = False

    def handled(self) -> None:
        self.page.wait_for_function(f"() => window.__framesHandled >= {self.sent}")


def test_a_busy_status_that_comes_after_its_run_ended_leaves_the_badge_idle(page, server):
    sockets = HeldBack(page)
    login(page, server)
    new_session(page)
    # The "busy" the API published when it admitted the run (another process than the
    # worker that ran it) arrives after the run's end — and so does the run's "pending" it
    # published with it (CI saw it come late on its own and pass the held "busy": an order
    # the server never sends).
    sockets.hold = lambda e: (
        (e.get("type") == "session.status" and e.get("status") == "busy")
        or (e.get("type") == "run.updated" and e["run"]["status"] == "pending")
    )
    send(page, "say late")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'late'")
    sockets.wait_for(lambda e: e.get("type") == "run.updated" and e["run"]["status"] == "completed")
    sockets.wait_for(lambda e: e.get("type") == "session.status" and e.get("status") == "idle")
    sockets.release()
    sockets.handled()  # the late frames too
    assert page.evaluate(BADGE_IDLE), "a run known ended holds nothing"
    # The chat still takes a run's "busy" when it comes in time.
    send(page, "wait 1\nsay next")
    page.wait_for_function("() => document.getElementById('status').textContent.trim() === 'busy'")
    wait_idle(page)


def test_a_session_event_older_than_a_revert_does_not_take_the_revert_back(page, server):
    sockets = HeldBack(page)
    login(page, server)
    new_session(page)
    for script in ("write a.txt A1", "write b.txt B1"):
        send(page, script)
        wait_idle(page)
    second = page.locator("#messages .msg.user").nth(1)
    second.hover()
    second.locator("> .actions").get_by_role("button", name="Rewind options").click()
    second.get_by_role("menuitem", name="Files only").click()
    page.wait_for_selector("#files-rewound:not([hidden])")
    # The undo's session event (no revert) is late: the next revert's reply overtakes it.
    sockets.hold = lambda e: e.get("type") == "session.updated" and not e["session"]["revert"]
    page.click("#undo-files-rewind")
    page.wait_for_selector("#files-rewound", state="hidden")
    second.hover()
    second.locator("> .actions").get_by_role("button", name="Rewind options").click()
    second.get_by_role("menuitem", name="Conversation only").click()
    page.wait_for_selector("#revert-bar:not([hidden])")
    prompt_back(page, "write b.txt B1")
    sockets.release()
    sockets.handled()  # the late frames too
    assert page.locator("#revert-bar").is_visible(), "the revert stands"
    assert page.input_value("#prompt") == "write b.txt B1", "the revert's prompt stays"
