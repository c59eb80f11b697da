"""Signing up with ``SIGNUP=approval`` as a new user would, at 390 and 1280 px (issue 46,
point 15): the login page's link, the form, the page that says the account waits, a login
that says the same, the admin's "waiting" filter and "Approve" action, then a login that
works. The pages fit the width (no sideways scroll)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.embedded_server import EmbeddedServer

pytestmark = pytest.mark.timeout(240)
OWN_SERVER = True  # a deployment setting of its own (SIGNUP=approval)
PASSWORD = "a-long-pass-2026!"
WAITING = "waiting for an administrator to approve it"


@pytest.fixture(scope="module")
def approval_server():
    tmp = Path(tempfile.mkdtemp(prefix="agentplat-e2e-signup-"))
    server = EmbeddedServer(tmp, SIGNUP="approval")
    try:
        yield server.start(timeout=120)  # a loaded machine starts it slowly
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def fits(page) -> None:  # noqa: ANN001 - a Playwright page
    wide = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert wide <= 0, f"{page.url} scrolls sideways by {wide} px"


def log_in(page, url: str, username: str, password: str) -> None:  # noqa: ANN001
    page.goto(f"{url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")


@pytest.mark.parametrize("width", [390, 1280])
def test_sign_up_wait_for_approval_then_log_in(browser, approval_server, width) -> None:  # noqa: ANN001
    url, name = approval_server.url, f"newcomer{width}"
    errors: list[str] = []
    person = browser.new_context(viewport={"width": width, "height": 900})
    admin = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = person.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{url}/login/")
        page.get_by_role("link", name="Create an account").click()
        page.wait_for_url(f"{url}/signup/")
        assert "approves each new account" in page.locator("#signup-approval").inner_text()
        fits(page)
        page.fill("input[name=username]", name)
        page.fill("input[name=password1]", PASSWORD)
        page.fill("input[name=password2]", PASSWORD)
        page.get_by_role("button", name="Create the account").click()
        assert WAITING in page.locator("#signup-waiting").inner_text()
        fits(page)
        page.screenshot(path=f"/tmp/signup-waiting-{width}.png")

        log_in(page, url, name, PASSWORD)
        assert WAITING in page.locator("#login-waiting").inner_text()
        assert page.locator("text=Wrong username or password").count() == 0
        fits(page)
        page.screenshot(path=f"/tmp/signup-login-waiting-{width}.png")

        desk = admin.new_page()
        log_in(desk, url, "demo", "demo-password")
        desk.wait_for_url(f"{url}/")
        desk.goto(f"{url}/admin/auth/user/?signup=waiting")
        rows = desk.locator("#result_list tbody tr")
        assert rows.count() == 1 and name in rows.first.inner_text()
        desk.screenshot(path=f"/tmp/signup-admin-waiting-{width}.png")
        rows.first.locator("input[name=_selected_action]").check()
        desk.select_option("select[name=action]", "approve")
        desk.locator("button[name=index]").click()
        assert "1 account(s) approved" in desk.locator("ul.messagelist").inner_text()

        log_in(page, url, name, PASSWORD)
        page.wait_for_url(f"{url}/")
        fits(page)
    finally:
        person.close()
        admin.close()
    assert not errors, errors
