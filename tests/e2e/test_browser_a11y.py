"""Accessibility, checked by axe-core (vendored in static/vendor/axe-core/) in a real browser:
the login page, the session list, a chat page with a finished conversation that called a tool
and answered in Markdown (its session menu closed and open) and the shared page have no
violation of impact "serious" or "critical", in the light and in the dark colour scheme. axe
is loaded from /static/, so it runs under the page's own Content-Security-Policy, as the pages
do."""

from __future__ import annotations

import json

import pytest

from .ui import LAST_ASSISTANT_TEXT, login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(240)

AXE = "/static/vendor/axe-core/axe.min.js"
BLOCKING = ("serious", "critical")

# Violations known on the chat page, as (rule id, axe's selector of the node): none now.
CHAT_KNOWN: set[tuple[str, str]] = set()

# An answer in Markdown (the scripted model makes each two-character \\n a line break): the
# rendered text, a highlighted code block with its Copy button, a table and a link are checked too.
MARKDOWN = (
    "## Done\\n\\nSome **bold**, `code` and https://example.com.\\n\\n"
    "```python\\nimport os\\nprint(len(os.listdir('.')), 'files')  # a comment\\n```\\n\\n"
    "| file | size |\\n|---|---:|\\n| notes.txt | 2 |"
)

WIDE = """async () => {
  const { renderInto } = await import('/static/markdown.js');
  const msg = document.createElement('div');
  msg.className = 'msg assistant';
  const text = document.createElement('div');
  text.className = 'text';
  msg.append(text);
  document.getElementById('messages').append(msg);
  const cells = (word) => '| ' + Array(30).fill(word).join(' | ') + ' |';
  const code = Array(60).fill("print('" + 'x'.repeat(300) + "')  # a comment").join('\\n');
  renderInto(text, '```python\\n' + code + '\\n```\\n\\n' + cells('column') + '\\n'
    + cells('---') + '\\n' + cells('value'));
  const pre = text.querySelector('pre');
  const table = text.querySelector('.md-table');
  return pre.scrollWidth > pre.clientWidth && pre.scrollHeight > pre.clientHeight
    && table.scrollWidth > table.clientWidth;
}"""

RUN_AXE = """async () => {
  const result = await axe.run(document, { resultTypes: ['violations'] });
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map(n => ({ target: n.target.join(' '), summary: n.failureSummary })),
  }));
}"""


def _violations(page, server, name: str) -> list[dict]:
    """The page's blocking violations (less the known ones), after printing all it has."""
    if not page.evaluate("() => typeof axe !== 'undefined'"):
        page.add_script_tag(url=f"{server.url}{AXE}")
    found = page.evaluate(RUN_AXE)
    blocking = []
    for v in found:
        print(f"[{name}] {v['impact']} {v['id']}: {v['help']}")
        for n in v["nodes"]:
            print(f"    {n['target']}: {n['summary']}")
        known = CHAT_KNOWN if name.startswith("chat") else set()
        nodes = [
            n
            for n in v["nodes"]
            if not any(v["id"] == rule and n["target"].endswith(end) for rule, end in known)
        ]
        if v["impact"] in BLOCKING and nodes:
            blocking.append({**v, "page": name, "nodes": nodes})
    return blocking


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_pages_have_no_serious_accessibility_violations(page, server, scheme):
    # Both colour schemes (static/theme.js follows the browser's prefers-color-scheme).
    page.emulate_media(color_scheme=scheme)
    blocking: list[dict] = []
    page.goto(f"{server.url}/login/")
    assert page.evaluate("() => document.documentElement.dataset.theme") == scheme
    blocking += _violations(page, server, "login")

    login(page, server)
    sid = new_session(page)
    send(page, f"say {MARKDOWN}\nwrite notes.txt hi")
    page.wait_for_selector("#messages details.tool")
    page.wait_for_selector("#messages .md table")
    page.wait_for_selector("#messages .md pre code.hljs .hljs-string")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'done'")
    wait_idle(page)
    page.locator("#files li", has_text="notes.txt").wait_for()
    page.locator("#changes li", has_text="notes.txt").wait_for()
    blocking += _violations(page, server, "chat")

    page.click("#session-menu summary")
    page.click("#share")
    page.wait_for_selector("#share-box:not([hidden])")
    url = page.input_value("#share-url")
    blocking += _violations(page, server, "chat, session menu open")

    page.goto(f"{server.url}/")
    page.locator(f"li[data-session-id='{sid}']").wait_for()
    blocking += _violations(page, server, "sessions")

    page.goto(url)
    page.wait_for_selector("#fork-shared")
    page.locator("details.tool summary").first.click()
    page.wait_for_selector("#messages .md pre code.hljs .hljs-string")
    blocking += _violations(page, server, "shared")

    # Markdown wider and taller than its bubble: the code block and the table scroll.
    assert page.evaluate(WIDE), "the code block and the table overflow their bubble"
    blocking += _violations(page, server, "shared, wide Markdown")

    assert not blocking, "axe violations:\n" + json.dumps(blocking, indent=1)
