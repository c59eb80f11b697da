"""A tool card stopped by the recovery says why in words (docs/semantics.md §1.5, §16.5):
"interrupted (resume)" and "interrupted (blocked)" were the recovery's reason codes, shown
as they were after a worker or its host was lost (seen in issue 45's operator trial), and a
call lost with its host said only "error"."""

from __future__ import annotations

import json
import re

import pytest

from .ui import login, new_session, turn

pytestmark = pytest.mark.timeout(120)


def _stopped_as(page, metadata: dict) -> None:  # noqa: ANN001
    """The chat's reads of the transcript answer the first tool call as stopped so."""

    def rewrite(route) -> None:  # noqa: ANN001 - Playwright's Route
        response = route.fetch()
        body = response.json()
        for message in body.get("results", []):
            for part in message.get("parts", []):
                if part.get("type") == "tool":
                    part["state"] = {**part["state"], "status": "error", "metadata": metadata}
        route.fulfill(response=response, body=json.dumps(body))

    page.route(re.compile(r"/api/sessions/ses_[^/]+/messages/"), rewrite)


@pytest.mark.parametrize(
    ("metadata", "label"),
    [
        ({"interrupted": True, "reason": "resume"}, "its worker stopped; not run again"),
        ({"interrupted": True, "reason": "blocked"}, "not run: an earlier call was interrupted"),
        ({"interrupted": True, "reason": "cancelled"}, "interrupted (cancelled)"),
        ({"lost_with_host": "alpha"}, "lost with host alpha"),
    ],
)
def test_a_stopped_calls_card_says_why_in_words(page, server, metadata, label):
    login(page, server)
    new_session(page)
    turn(page, "write a.txt one\nsay done", "done")
    _stopped_as(page, metadata)
    page.reload()
    card = page.locator("#messages details.tool summary").first
    card.wait_for()
    page.wait_for_function(
        "(label) => document.querySelector('#messages details.tool summary')"
        ".textContent.includes(label)",
        arg=label,
        timeout=20_000,
    )
    assert "(resume)" not in card.inner_text() and "(blocked)" not in card.inner_text()
