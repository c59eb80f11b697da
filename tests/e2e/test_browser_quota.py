"""Issue 18 as an operator tries it: a group's token limit, a user who hits it in the chat and
reads why and when it comes back, the limit raised, and the user goes on — in Chromium against
the real stack (Daphne, a Celery worker, PostgreSQL, Redis)."""

from __future__ import annotations

import pytest

from .ui import LAST_ASSISTANT_TEXT, login, new_session, send, wait_idle

OWN_SERVER = True  # a group limit on the demo user (conftest.py: not the shared server)
SET_GROUP_LIMIT = """
from django.contrib.auth.models import Group, User
from quotas_app.models import Quota

group, _ = Group.objects.get_or_create(name="trial")
Quota.objects.update_or_create(group=group, defaults={{"tokens_per_day": {limit}}})
User.objects.get(username="demo").groups.add(group)
"""


@pytest.mark.allow_status(429)
def test_a_user_hits_the_group_limit_in_the_chat_and_goes_on_once_it_is_raised(page, server):
    server.manage("shell", "-c", SET_GROUP_LIMIT.format(limit=10))
    login(page, server)
    new_session(page)
    # The budget shows where a limit is set.
    page.wait_for_function(
        "() => document.getElementById('budget').textContent.includes('of 10 tokens left today')"
    )
    send(page, "say over the budget")  # one call of some 30 tokens: past the limit of 10
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'over the budget'")
    wait_idle(page)
    page.fill("#prompt", "say refused")
    page.click("#send")
    error = page.locator("#error")
    error.wait_for()
    page.wait_for_function(
        "() => document.getElementById('error').textContent.includes('of your 10 tokens per day')"
    )
    assert "resets at" in error.inner_text()
    page.wait_for_function(
        "() => document.getElementById('budget').textContent.includes('0 of 10 tokens left')"
    )
    assert page.input_value("#prompt") == "say refused", "the refused prompt is kept"

    server.manage("shell", "-c", SET_GROUP_LIMIT.format(limit=1_000_000))
    page.click("#send")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'refused'")
    wait_idle(page)
    assert page.locator("#error").is_hidden()
    page.wait_for_function(
        "() => document.getElementById('budget').textContent.includes('of 1,000,000 tokens')"
    )
