"""Assistant Markdown in a real browser (static/markdown.js): headings, lists, tables and code
render as elements, code is highlighted and has a Copy button that copies (the clipboard API
and the fallback), links open in a new tab, an unfinished fence renders as code so far, a long
answer renders in a few milliseconds, and model-written HTML and script URLs come out inert.
The module is loaded the way the app loads it, by an import from 'self' in a logged-in page;
the shared page renders a scripted Markdown answer."""

from __future__ import annotations

import json
import re

import pytest

from .ui import LAST_ASSISTANT_TEXT, login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(240)

# Renders the argument into a fresh <div id="md-N"> in <main> and returns its id.
RENDER = """async (text) => {
  const { renderInto } = await import('/static/markdown.js');
  const el = document.createElement('div');
  el.id = 'md-' + document.querySelectorAll('[id^="md-"]').length;
  el.className = 'text';
  document.querySelector('main').append(el);
  renderInto(el, text);
  return el.id;
}"""

SAMPLE = """# Title

Some *emphasis*, **strong**, `inline code` and a link to https://example.com/docs.

## A list

- one
- two
  1. nested
  2. ordered

> a quote

| name | size |
|:-----|-----:|
| a.txt | 10 |
| b.txt | 200 |

```python
def greet(name: str) -> str:
    return f"hello {name}"
```

See [the docs](https://example.com/a "Docs") or mail me@example.com.
"""


TRICKY = """Intro
=====
text
| a | b |
|---|---:|
| 1 | 2 |
after the table

- one

- two
  continued
lazy line
> quote
lazy quote

1. first
2) other

```
code
```
~~~py
x = 1
~~~
    indented code

***
Done.
"""


def _render(page, text: str) -> str:
    return "#" + page.evaluate(RENDER, text)


def test_markdown_renders_as_elements_with_highlighted_copyable_code(page, server):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
    login(page, server)
    sel = _render(page, SAMPLE)
    box = page.locator(sel)

    assert box.locator("h1").inner_text() == "Title"
    assert box.locator("h2").inner_text() == "A list"
    assert box.locator("em").inner_text() == "emphasis"
    assert box.locator("strong").inner_text() == "strong"
    assert box.locator("p > code").inner_text() == "inline code"
    assert box.locator("ul > li").count() == 2
    assert box.locator("ul ol > li").all_inner_texts() == ["nested", "ordered"]
    assert box.locator("blockquote").inner_text().strip() == "a quote"
    assert box.locator("table th").all_inner_texts() == ["name", "size"]
    assert box.locator("table tbody tr").count() == 2
    assert box.locator("td.md-align-right").first.inner_text() == "10"
    assert box.locator("[style]").count() == 0, "no inline styles: the CSP refuses them"

    code = box.locator("pre > code.hljs.language-python")
    assert code.inner_text().startswith("def greet(name: str) -> str:")
    assert code.locator("span.hljs-keyword").first.inner_text() == "def"
    assert code.locator("span.hljs-string").count() >= 1

    links = box.locator("a")
    assert links.evaluate_all("as => as.map(a => a.getAttribute('href'))") == [
        "https://example.com/docs",
        "https://example.com/a",
        "mailto:me@example.com",
    ]
    for a in links.all():
        assert a.get_attribute("target") == "_blank"
        assert a.get_attribute("rel") == "noopener noreferrer"
    assert box.locator("a[title=Docs]").inner_text() == "the docs"

    # -- Copy, through the clipboard API -------------------------------------------------------
    button = box.get_by_role("button", name="Copy code")
    assert button.count() == 1
    button.click()
    label = f"() => document.querySelector('{sel} .md-copy').textContent"
    page.wait_for_function(f"() => ({label})() === 'Copied'")
    copied = page.evaluate("() => navigator.clipboard.readText()")
    assert copied == 'def greet(name: str) -> str:\n    return f"hello {name}"'
    page.wait_for_function(f"() => ({label})() === 'Copy'")

    # -- Copy, through the fallback (no clipboard API): the code selected, execCommand('copy') --
    page.evaluate(
        """() => {
          Object.defineProperty(navigator, 'clipboard', { value: undefined, configurable: true });
          document.execCommand = (command) => {
            window.__copied = command === 'copy' ? String(document.getSelection()) : null;
            return true;
          };
        }"""
    )
    fallback = page.locator(_render(page, "```\nplain text\n```"))
    assert fallback.locator("pre > code.hljs").inner_text() == "plain text"
    fallback.get_by_role("button", name="Copy code").click()
    page.wait_for_function("() => window.__copied !== undefined")
    assert page.evaluate("() => window.__copied") == "plain text"
    assert fallback.locator(".md-copy").inner_text() == "Copied"


def test_unfinished_markdown_renders_while_it_streams_and_fast(page, server):
    login(page, server)
    box = page.locator(_render(page, "Here:\n\n```js\nconst a = 1;\nfunction f("))
    code = box.locator("pre > code.language-javascript, pre > code.language-js")
    assert code.inner_text().startswith("const a = 1;\nfunction f(")
    assert code.locator("span.hljs-keyword").count() >= 2
    assert box.get_by_role("button", name="Copy code").count() == 1

    # An unclosed emphasis, list and table header render as far as they go, without an error.
    for partial in ("**bold", "- one\n- tw", "| a | b |\n|--", "[link](https://exa", "`code"):
        assert page.locator(_render(page, partial)).inner_text().strip()

    # Streamed one character at a time, text whose blocks change as more arrives (a setext
    # heading, a table under a paragraph, a loose list, a fence closed late, lazy lines)
    # ends exactly as the whole render.
    same = page.evaluate(
        """async (text) => {
          const { renderMarkdown, renderInto } = await import('/static/markdown.js');
          const el = document.createElement('div');
          for (let end = 1; end <= text.length; end++) renderInto(el, text.slice(0, end));
          const whole = document.createElement('div');
          whole.append(renderMarkdown(text));
          return el.innerHTML === whole.innerHTML || [el.innerHTML, whole.innerHTML];
        }""",
        TRICKY,
    )
    assert same is True, same

    # 20 KB of mixed Markdown, rendered whole, and streamed: renderInto with the text so far at
    # every delta (of 100 characters, then of 7), which keeps the complete blocks and renders
    # the last one again; the streamed result is exactly the whole render.
    timing = page.evaluate(
        """async (sample) => {
          const { renderMarkdown, renderInto } = await import('/static/markdown.js');
          let text = '';
          while (text.length < 20000) text += sample + '\\n';
          const whole = document.createElement('div');
          whole.append(renderMarkdown(text));
          const times = [];
          for (let i = 0; i < 9; i++) {
            const t0 = performance.now();
            renderMarkdown(text);
            times.push(performance.now() - t0);
          }
          times.sort((a, b) => a - b);
          const result = { length: text.length, whole: times[4],
                           code: whole.querySelectorAll('pre code.hljs').length };
          for (const step of [100, 7]) {
            const el = document.createElement('div');
            let renders = 0;
            const t0 = performance.now();
            for (let end = step; end < text.length + step; end += step) {
              renderInto(el, text.slice(0, end));
              renders++;
            }
            result[`delta${step}`] = (performance.now() - t0) / renders;
            result[`same${step}`] = el.innerHTML === whole.innerHTML;
          }
          return result;
        }""",
        SAMPLE,
    )
    print(f"markdown render timing (ms): {json.dumps(timing)}")
    assert timing["code"] >= 20
    assert timing["same100"] and timing["same7"], "streamed renders end as the whole render"
    # Typically ~1-2 ms a delta and a few tens of ms for the whole 20 KB; the bounds leave
    # room for a busy CI runner.
    assert timing["delta100"] < 25, timing
    assert timing["delta7"] < 25, timing
    assert timing["whole"] < 500, timing


UNFOLLOWABLE = "[vb](vbscript:msgbox(1)) [f](file:///etc/passwd) [rel](/sessions/) [h](#top)"
XSS = [
    '<img src=x onerror="window.__xss=1">',
    "<script>window.__xss=2</script>",
    "[click](javascript:window.__xss=3)",
    '<a href="javascript:window.__xss=4">link</a>',
    '<svg onload="window.__xss=5"><circle r=5></circle></svg>',
    '<iframe src="javascript:window.__xss=6"></iframe>',
    "[x](JaVaScRiPt:window.__xss=7) [y]( javascript:window.__xss=8 )",
    "[z](java&#115;cript:window.__xss=9) [w](&#106;avascript:window.__xss=9)",
    "[d](data:text/html,<script>window.__xss=10</script>) <javascript:window.__xss=11>",
    "![img](javascript:window.__xss=12)",
    '![img2](https://example.com/x.png" onerror="window.__xss=13)',
    '[t](https://example.com "a\\" onmouseover=\\"window.__xss=14")',
    '```"><img src=x onerror=window.__xss=15>\ncode\n```',
    "```html\n<img src=x onerror=window.__xss=16>\n```",
    "`<img src=x onerror=window.__xss=17>`",
    '<details open ontoggle="window.__xss=18"><summary>s</summary></details>',
    "| a |\n|---|\n| <img src=x onerror=window.__xss=19> |",
    "<style>body{display:none}</style> <object data=x></object> <embed src=x>",
    '<math><mtext><table><mglyph><style><img src=x onerror="window.__xss=20">',
    UNFOLLOWABLE,
]


def test_model_written_html_and_script_urls_are_inert(browser, server):
    # Without the CSP, which would block inline handlers and javascript: URLs by itself: here
    # only the renderer stands between the payloads and window.__xss.
    context = browser.new_context(bypass_csp=True)
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        login(page, server)
        ids = [_render(page, payload) for payload in XSS]
        ids.append(_render(page, "\n\n".join(XSS)))
        page.wait_for_timeout(500)  # an onerror/onload would have fired by now
        for sel in ids:
            box = page.locator(sel)
            found = box.evaluate(
                """(el) => {
                  const all = [...el.querySelectorAll('*')];
                  return {
                    handlers: all.flatMap(e => [...e.attributes].filter(a => /^on/i.test(a.name))
                                                               .map(a => e.tagName + ' ' + a.name)),
                    tags: all.map(e => e.tagName.toLowerCase()).filter(t =>
                      ['script', 'iframe', 'svg', 'img', 'object', 'embed', 'style', 'math',
                       'details', 'form', 'input', 'link', 'meta', 'base'].includes(t)),
                    hrefs: all.filter(e => e.hasAttribute('href')).map(e => e.getAttribute('href')),
                    srcs: all.filter(e => e.hasAttribute('src')).map(e => e.getAttribute('src')),
                    styles: all.filter(e => e.hasAttribute('style')).length,
                    text: el.textContent,
                  };
                }"""
            )
            assert not found["handlers"], (sel, found)
            assert not found["tags"], (sel, found)
            assert not found["srcs"], (sel, found)
            assert not found["styles"], (sel, found)
            bad = [h for h in found["hrefs"] if not re.match(r"^(https?://|mailto:)", h)]
            assert not bad, (sel, found)
        # Shown as text, not dropped: the reader sees what the model wrote.
        first = page.locator(ids[0]).inner_text()
        assert '<img src=x onerror="window.__xss=1">' in first
        assert "[click](javascript:window.__xss=3)" in page.locator(ids[2]).inner_text()
        # Links nobody can follow are plain text; the http(s) image became a link, not an image.
        assert page.locator(ids[XSS.index(UNFOLLOWABLE)]).locator("a").count() == 0
        assert page.evaluate("() => window.__xss") is None
        assert not errors, errors
    finally:
        context.close()


SCRIPT = (
    "say # Plan\\n\\nSome **bold** and `code`, see https://example.com.\\n\\n- one\\n- two"
    "\\n\\n```python\\nprint(1)\\n```\nwrite plan.txt day one"
)


def test_the_shared_page_renders_the_assistant_markdown(page, server):
    login(page, server)
    new_session(page)
    send(page, SCRIPT)
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'done'")
    wait_idle(page)
    page.click("#session-menu summary")
    page.click("#share")
    page.wait_for_selector("#share-box:not([hidden])")
    url = page.input_value("#share-url")

    page.goto(url)
    answer = page.locator("#messages .msg.assistant .text.md")
    answer.locator("h1").wait_for()
    assert answer.locator("h1").inner_text() == "Plan"
    assert answer.locator("strong").inner_text() == "bold"
    assert answer.locator("p code").inner_text() == "code"
    assert answer.locator("ul > li").all_inner_texts() == ["one", "two"]
    assert answer.locator("pre code.language-python").inner_text() == "print(1)"
    assert answer.get_by_role("button", name="Copy code").count() == 1
    link = answer.locator("a[href='https://example.com']")
    assert link.get_attribute("target") == "_blank"
    # The user's message is what they typed, as text.
    user = page.locator("#messages .msg.user .text")
    assert user.locator("*").count() == 0
    assert "**bold**" in user.inner_text()

    # The files, buttons in their list items: a click, or Enter on the focused one, shows one.
    page.locator("#files li", has_text="plan.txt").click()
    page.wait_for_function("() => document.getElementById('file-view').textContent === 'day one'")
    page.evaluate("() => { document.getElementById('file-view').textContent = ''; }")
    page.get_by_role("button", name="plan.txt").focus()
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.getElementById('file-view').textContent === 'day one'")
