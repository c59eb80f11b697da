"""The Content-Security-Policy in a real browser (Debian's Chromium): every page a user or an
admin meets — the sessions list, a chat streaming an answer over its websocket, the shared page,
the API docs, the admin's changelist, change form and revert action — works under the policy,
and the browser reports no violation of it at all."""

from __future__ import annotations

import pytest

from .ui import LAST_ASSISTANT_TEXT, login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(180)

# Reported by every document the test loads; the binding outlives navigations.
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (e) => {
  window.reportCspViolation(
    `${location.pathname}: ${e.effectiveDirective} blocked ${e.blockedURI || "inline"}` +
    ` (${e.sourceFile || "?"}:${e.lineNumber})`
  );
});
"""


def test_every_page_works_under_the_policy_without_a_violation(page, server):
    violations: list[str] = []
    documents: list[tuple[str, str]] = []
    frames: list[str] = []
    page.expose_function("reportCspViolation", lambda text: violations.append(text))
    page.add_init_script(REPORT_VIOLATIONS)
    page.on(
        "console",
        lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page.on(
        "response",
        lambda r: (
            documents.append((r.url, r.headers.get("content-security-policy", "")))
            if r.request.resource_type == "document"
            else None
        ),
    )
    page.on(
        "websocket",
        lambda ws: ws.on("framereceived", lambda _: frames.append(ws.url)),
    )
    try:
        _visit_every_page(page, server, frames)
    except Exception as exc:
        print(server.logs())
        page.wait_for_timeout(500)  # console reports arrive after the step that caused them
        # A violation is the likely cause of a step that failed: say so first.
        assert not violations, f"CSP violations, then {exc!r}:\n" + "\n".join(violations)
        raise
    page.wait_for_timeout(500)  # the last page's reports reach us
    assert not violations, "CSP violations:\n" + "\n".join(violations)
    assert len(documents) >= 10
    unprotected = [url for url, csp in documents if "script-src 'self'" not in csp]
    assert not unprotected, f"documents without the policy: {unprotected}"


def _visit_every_page(page, server, frames: list[str]) -> None:
    # -- the chat: an answer streams over the websocket -------------------------------------
    login(page, server)
    sid = new_session(page)
    send(page, "say hello under the policy")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'hello under the policy'")
    wait_idle(page)
    assert any(f"/ws/sessions/{sid}/" in url for url in frames), "events came by websocket"

    # -- the shared page ------------------------------------------------------------------------
    page.click("#session-menu summary")
    page.click("#share")
    page.wait_for_selector("#share-box:not([hidden])")
    page.goto(page.input_value("#share-url"))
    page.wait_for_selector("#shared #messages")
    assert "hello under the policy" in page.locator("#messages").inner_text()

    # -- the API docs: Swagger UI renders the schema -----------------------------------------
    page.goto(f"{server.url}/api/docs/")
    page.wait_for_selector(".swagger-ui .info .title")
    page.wait_for_selector(".swagger-ui .opblock")
    assert "Agent sessions platform API" in page.locator(".swagger-ui .info").inner_text()

    # -- the admin: changelist, change form, the revert action's page ------------------------
    changelist = f"{server.url}/admin/sessions_app/session/"
    page.goto(changelist)
    page.wait_for_selector(f'#result_list input.action-select[value="{sid}"]')
    page.goto(f"{server.url}/admin/sessions_app/session/{sid}/change/")
    page.wait_for_selector("#session_form")
    page.goto(changelist)
    page.check(f'input.action-select[value="{sid}"]')
    page.select_option('select[name="action"]', "revert_action")
    page.click('button[name="index"]')
    page.wait_for_selector('input[name="boundary"]')
    page.locator("td.revert-part input[type=radio]").first.check()
    page.click('input[name="preview"]')
    page.wait_for_selector("text=The revert will change")
    indent = page.evaluate(
        """() => [document.querySelector('td.revert-part'),
                   document.querySelector('tbody tr td')]
                 .map((td) => parseFloat(getComputedStyle(td).paddingLeft))"""
    )
    assert indent[0] > indent[1], "the part rows are indented by the page's stylesheet"

    # -- the sessions list: deleting asks first (a static script, no inline handler) ---------
    page.goto(f"{server.url}/")
    row = page.locator(f'li[data-session-id="{sid}"]')
    asked: list[str] = []

    def answer(dialog, accept: bool) -> None:  # noqa: ANN001
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.once("dialog", lambda d: answer(d, False))
    row.locator("summary").click()
    row.get_by_role("button", name="Delete").click()
    page.wait_for_timeout(300)
    assert asked == ["Delete this session, its messages and its files?"]
    assert row.count() == 1, "dismissed: nothing deleted"
    page.once("dialog", lambda d: answer(d, True))
    with page.expect_navigation():
        row.get_by_role("button", name="Delete").click()
    assert len(asked) == 2
    assert page.locator(f'li[data-session-id="{sid}"]').count() == 0
