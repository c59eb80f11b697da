"""A session of thousands of files, as a new user met it (issue 46's trial): its Files list
scrolls within the panel so that the file opened shows in view at both widths; the first
message says the real number of files left out of its line, with "show all" on a line of its
own and readable; its shared page lists a bounded number of files and says how many more."""

from __future__ import annotations

import io
import zipfile

import pytest

from .ui import login

pytestmark = pytest.mark.timeout(180)

COUNT = 3000


def _zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for i in range(COUNT):
            zf.writestr(f"pkg/mod{i // 100}/file_{i:05d}.py", f"X = {i}\n")
    return out.getvalue()


def _upload(page, server) -> str:  # noqa: ANN001
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    answer = page.request.post(
        f"{server.url}/api/sessions/upload/",
        multipart={
            "file": {"name": "big.zip", "mimeType": "application/zip", "buffer": _zip()},
            "title": "Big",
        },
        headers={"X-CSRFToken": csrf, "Referer": f"{server.url}/"},
    )
    assert answer.status == 201, answer.text()
    return answer.json()["id"]


LUMINANCE = """(el) => {
  const rgb = (s) => s.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const lum = ([r, g, b]) => [r, g, b].map((c) => { c /= 255;
    return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; })
    .reduce((a, c, i) => a + c * [0.2126, 0.7152, 0.0722][i], 0);
  const clear = (n) => getComputedStyle(n).backgroundColor === 'rgba(0, 0, 0, 0)';
  let bg = el; while (bg && clear(bg)) bg = bg.parentElement;
  const a = lum(rgb(getComputedStyle(el).color));
  const b = lum(rgb(getComputedStyle(bg).backgroundColor));
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""


def _viewer_in_view(page, width: int) -> None:  # noqa: ANN001
    if width < 800:
        page.click("#files-toggle")
    page.locator("#files button.file-link", has_text="file_00005.py").click()
    page.wait_for_selector("#file-view:not([hidden])")
    page.wait_for_function(
        "() => document.querySelector('#file-view pre').textContent.includes('X = 5')"
    )
    box = page.locator("#file-view").bounding_box()
    height = page.viewport_size["height"]
    # An uploaded line's gutter says so in full (it read "before th…" in a quarter's width).
    gutter = page.locator("#file-view .blame-gutter").first
    cut = gutter.evaluate("(g) => g.scrollWidth > g.clientWidth + 1")
    assert not cut, gutter.get_attribute("data-label")
    assert box["y"] >= 0 and box["y"] + 40 <= height, (box, height)


def test_thousands_of_files_in_the_chat_and_on_the_shared_page(page, server):  # noqa: ANN001
    login(page, server)
    sid = _upload(page, server)
    for width, height in ((1280, 800), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.goto(f"{server.url}/sessions/{sid}/")
        line = page.locator("#messages .msg.user .patch")
        line.wait_for()
        # The real number left out, not one counted from the API's cut of the list.
        assert f"and {COUNT - 12:,} more" in line.inner_text()
        more = page.locator("#messages .msg.user button.show-whole")
        # On a line of its own (it was glued after "more"), and as readable as a link.
        assert more.bounding_box()["x"] <= line.bounding_box()["x"] + 1
        assert more.evaluate(LUMINANCE) >= 4.5
        _viewer_in_view(page, width)
        page.screenshot(path=f"/tmp/many-files-{width}.png")

    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    shared = page.request.post(
        f"{server.url}/api/sessions/{sid}/share/",
        data={},
        headers={"X-CSRFToken": csrf, "Referer": f"{server.url}/"},
    )
    assert shared.status == 201, shared.text()
    html = page.request.get(f"{server.url}{shared.json()['url']}")
    assert html.ok
    body = html.text()
    assert len(html.body()) < 100_000, len(html.body())  # 1.4 MB for a big repository before
    assert f"and {COUNT - 200:,} more files" in body
    assert f"and {COUNT - 12:,} more" in body  # the first message's line, cut at 12 names
    # The file opened on the shared page shows in view, not under the listed rows.
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{server.url}{shared.json()['url']}")
    page.locator("#files button[data-path]", has_text="file_00005.py").click()
    page.wait_for_function("() => document.getElementById('file-view').textContent === 'X = 5\\n'")
    view = page.locator("#file-view").bounding_box()
    assert view["y"] >= 0 and view["y"] + view["height"] <= 800, view
    page.screenshot(path="/tmp/many-files-shared.png")
