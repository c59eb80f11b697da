"""Shown is stored (issue 25, point 2), in Debian's Chromium against the real stack: the chat
notices missed events by their ``prev`` and reads the database again, and when a run ends it
shows what the database holds — a streamed tail that was never stored goes. Either way the
chat then shows what a reload shows."""

from __future__ import annotations

import re

import pytest

from core.ids import message_id, part_id
from realtime import events

from .ui import (
    LAST_ASSISTANT_TEXT,
    edit_first_message,
    filter_session_events,
    login,
    new_session,
    revert_here,
    send,
    wait_idle,
)

# What the reader sees of each message: its role and the text of its parts.
SHOWN = """() => [...document.querySelectorAll('#messages .msg')].map((m) => [
  m.classList.contains('user') ? 'user' : 'assistant',
  [...m.querySelectorAll('.text, .reasoning, details.tool > summary')].map((e) => e.textContent),
])"""


def answer(page, text: str) -> None:
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === {text!r}", timeout=40_000)
    wait_idle(page)


def two_branches(page, server, keep) -> None:  # noqa: ANN001 - keep: filter_session_events's
    """A new session whose first turn has two branches ("first", then "second", shown), its
    socket's events passed through ``keep``."""
    filter_session_events(page, keep)
    login(page, server)
    new_session(page)
    send(page, "say first")
    answer(page, "first")
    first_user = edit_first_message(page, "say second")
    first_user.get_by_role("button", name="Send the edited message").click()
    answer(page, "second")


def as_a_reload_shows(page) -> list:
    """The messages a fresh page of the same session shows."""
    fresh = page.context.new_page()
    fresh.goto(page.url)
    wait_idle(fresh)
    fresh.wait_for_function("() => document.querySelectorAll('#messages .msg').length > 0")
    shown = fresh.evaluate(SHOWN)
    fresh.close()
    return shown


def test_missed_events_are_noticed_by_prev_and_the_chat_reads_the_database(page, server, tmp_path):
    # Every event but session.status is dropped on its way to the page (a lossy path), for
    # one run: only the numbers of the status events tell the chat that it missed some.
    dropping = {"on": False}
    dropped: list[str] = []

    def keep(event: dict) -> bool:
        if dropping["on"] and event.get("type") not in ("session.status", "subscribed"):
            dropped.append(event["type"])
            return False
        return True

    filter_session_events(page, keep)
    login(page, server)
    new_session(page)
    send(page, "say the first answer")
    answer(page, "the first answer")
    # The first turn's nodes: a chat that shows the stored state again only where it differs
    # keeps them (no flicker).
    page.evaluate("() => { document.querySelector('#messages .msg.user').__kept = true; }")
    page.evaluate("() => { document.getElementById('messages').scrollTop = 0; }")

    dropping["on"] = True
    send(page, "say the second answer")
    answer(page, "the second answer")
    assert {"message.updated", "run.updated", "text-delta"} <= set(dropped), dropped
    page.wait_for_function(
        "() => document.querySelectorAll('#messages .msg').length === 4", timeout=10_000
    )
    assert page.evaluate(SHOWN) == as_a_reload_shows(page)
    assert page.evaluate("() => document.querySelector('#messages .msg.user').__kept === true")
    page.screenshot(path=str(tmp_path / "chat-after-refetch.png"), full_page=True)


def test_a_streamed_tail_the_database_never_got_goes_when_the_run_ends(page, server):
    login(page, server)
    sid = new_session(page)
    send(page, "say what was stored")
    answer(page, "what was stored")
    stored_answer = page.evaluate(
        "() => [...document.querySelectorAll('#messages .msg.assistant')].pop().dataset.messageId"
    )
    run = page.request.get(f"{server.url}/api/sessions/{sid}/runs/").json()
    run = (run["results"] if isinstance(run, dict) else run)[-1]

    # A worker streams text it never stores (it crashes before the checkpoint): a part of the
    # stored answer and a message of its own; then the run ends, as the sweep ends it.
    ghost_message = message_id()
    for mid in (stored_answer, ghost_message):
        events.publish_delta(
            sid, message_id=mid, part_id=part_id(), offset=0, text="GHOST tail", reasoning=False
        )
    assert events.publisher.flush()
    page.wait_for_function(
        "() => document.getElementById('messages').textContent.split('GHOST tail').length === 3"
    )
    events.publish(sid, events.RUN_UPDATED, run={**run, "status": "error"})
    assert events.publisher.flush()
    page.wait_for_function(
        "() => !document.getElementById('messages').textContent.includes('GHOST')",
        timeout=10_000,
    )
    assert page.evaluate(SHOWN) == as_a_reload_shows(page)
    assert page.locator("#messages .msg").count() == 2


def test_a_run_whose_last_events_never_came_is_read_again_after_a_quiet_while(page, server):
    """A worker killed between storing a run's end and publishing it leaves no later event
    whose ``prev`` could show the gap: the chat, showing a run in progress and hearing
    nothing for ``QUIET_MS`` (10 s), reads the session again and shows what it holds."""
    dropping = {"on": False, "armed": False}

    def keep(event: dict) -> bool:
        if dropping["on"] and event.get("type") != "subscribed":
            return False  # as if the worker died after committing: no later event, no gap
        if dropping["armed"] and event.get("type") == "session.status":
            # The chat knows the run is under way (this event still reaches it); everything
            # after it is lost.
            dropping["on"] = event.get("status") == "busy"
        return True

    filter_session_events(page, keep)
    login(page, server)
    new_session(page)
    send(page, "say the first answer")
    answer(page, "the first answer")
    dropping["armed"] = True
    send(page, "pace 0\nsay the silent answer")
    page.wait_for_function(
        f"() => ({LAST_ASSISTANT_TEXT})() === 'the silent answer'", timeout=30_000
    )
    wait_idle(page)
    assert page.evaluate(SHOWN) == as_a_reload_shows(page)


@pytest.mark.allow_status(409)  # the branch switch, refused while the run goes on
def test_missed_events_are_read_again_after_a_branch_switch_the_server_refused(page, server):
    """A read of the path begun before a branch switch is set aside when it answers after it
    (the switch reads its own path). A switch the server refuses (the session is busy) reads
    none: the read set aside, asked for missed events (a gap in ``prev``), is asked again —
    what those events said shows while the run goes on, not only once it ends."""
    dropping = {"on": False, "dropped": 0}

    def keep(event: dict) -> bool:
        part = event.get("part") or {}
        if dropping["on"] and "waiting" in (event.get("text"), part.get("text")):
            dropping["dropped"] += 1  # every word of it: the next event's ``prev`` shows the gap
            return False
        return True

    two_branches(page, server, keep)

    held, holding = [], [True]

    def hold(route) -> None:  # noqa: ANN001 - read by the server now, handed over later
        if not dropping["dropped"] or not holding[0]:  # reads from before the gap pass
            route.continue_()
            return
        held.append((route, route.fetch()))

    page.route("**/messages/", hold)  # the unpaged reads: the refetch for the gap
    dropping["on"] = True
    # A 2 s step first: the path's reads the run's start sets off (they pass) are answered
    # before the text exists, even on a loaded machine (one answered after it showed the
    # text by itself); then the text, then a long step.
    send(page, "wait 2\nsay waiting\nwait 20\nsay done")
    for _ in range(100):
        if held:
            break
        page.wait_for_timeout(100)
    assert dropping["dropped"], "the second step's text was dropped"
    assert held, "the chat read the path again for the event it missed"
    # The reader switches branches while the run goes on: the server refuses (busy).
    page.locator("#messages .msg.user").first.get_by_role("button", name="Previous branch").click()
    page.locator("#error:not([hidden])").wait_for(timeout=10_000)  # the 409, said
    said = page.locator("#messages .msg.assistant .text", has_text="waiting")
    assert said.count() == 0, "the dropped text is not shown yet"
    holding[0] = False
    for route, response in held:
        route.fulfill(response=response)  # answered after the switch that failed
    said.wait_for(timeout=5_000)
    assert page.evaluate("() => document.getElementById('status').textContent") == "busy", (
        "shown while the run still runs, not by its end"
    )


@pytest.mark.allow_status(409)  # the branch switch, refused while the run goes on
def test_events_left_out_by_a_reload_are_read_again_after_a_branch_switch_the_server_refused(
    page, server
):
    """While the path reloads, its events are left out and read afterwards (a merge read of
    the path). When a branch switch comes between, that read is set aside: the switch reads its
    own path. A switch the server refuses (busy) reads none, so the set-aside read is asked
    again — the text it holds shows while the run goes on, not 20 s later at its end."""
    streamed = {"waiting": False}

    def keep(event: dict) -> bool:
        # The step's stored text, which comes just after its deltas: the reload is handed over
        # after every event that holds the text (one that came after it would show the text
        # by itself, as a loaded CI machine once had it).
        if (event.get("part") or {}).get("text") == "waiting":
            streamed["waiting"] = True
        return True

    two_branches(page, server, keep)
    revert_here(page, page.locator("#messages .msg.user").first)

    reload_reads, merge_reads = [], []
    holding = {"phase": "reload"}  # then "merge" (the read after the reload), then "off"

    def hold(route) -> None:  # noqa: ANN001 - read by the server now, handed over later
        paged = "?limit=" in route.request.url
        if holding["phase"] == "reload" and paged:
            reload_reads.append((route, route.fetch()))
        elif holding["phase"] == "merge" and not paged:
            merge_reads.append((route, route.fetch()))
        else:
            route.continue_()

    page.route(re.compile(r"/messages/(\?limit=\d+)?$"), hold)
    # Sent over the revert: the head moves, the path reloads (read before the text is, a
    # step later), and the run streams while that read is held.
    send(page, "wait 1\nsay waiting\nwait 20\nsay done")
    for _ in range(150):
        if reload_reads and streamed["waiting"]:
            break
        page.wait_for_timeout(100)
    assert reload_reads and streamed["waiting"], "the text streamed while the path reloaded"
    holding["phase"] = "merge"
    for route, response in reload_reads:
        route.fulfill(response=response)  # read before the text was: without it
    for _ in range(100):
        if merge_reads:
            break
        page.wait_for_timeout(100)
    assert merge_reads, "the chat read the path again for the events the reload left out"
    said = page.locator("#messages .msg.assistant .text", has_text="waiting")
    assert said.count() == 0, "the text left out is not shown yet"
    # The reader switches branches while the run goes on: the server refuses (busy).
    page.locator("#messages .msg.user").first.get_by_role("button", name="Previous branch").click()
    page.locator("#error:not([hidden])").wait_for(timeout=10_000)  # the 409, said
    holding["phase"] = "off"
    for route, response in merge_reads:
        route.fulfill(response=response)  # answered after the switch that failed
    said.wait_for(timeout=5_000)
    assert page.evaluate("() => document.getElementById('status').textContent") == "busy", (
        "shown while the run still runs, not by its end"
    )
