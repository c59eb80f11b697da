"""Export and import in the browser: a session is downloaded (JSON and Markdown, as the chat's
session menu offers them), the JSON is imported from the session list's file input, and the
imported chat shows the conversation and its files; a file that is not an export is refused
with the server's sentence under the form."""

from __future__ import annotations

import contextlib
import io
import json
import os
import zipfile
from pathlib import Path

import pytest

from .ui import LAST_ASSISTANT_TEXT, files_on_disk, login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(240)

SHOTS = Path(os.environ.get("CHAT_SCREENSHOT", "/tmp/chat.png")).parent
MESSAGES = "() => document.getElementById('messages').innerText"


def test_an_exported_session_is_imported_from_the_session_list(browser, server, tmp_path):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(20_000)
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    page.on(
        "console",
        lambda m: (
            problems.append(m.text)
            if m.type == "error" and "Failed to load resource" not in m.text
            else None
        ),
    )
    try:
        _flow(page, server, tmp_path)
    except Exception:
        print(server.logs())
        with contextlib.suppress(Exception):  # best effort on the way out
            page.screenshot(path=str(SHOTS / "export-failure.png"), full_page=True)
        raise
    finally:
        context.close()
    assert not problems, problems


def _flow(page, server, tmp_path: Path) -> None:
    login(page, server)
    sid = new_session(page)
    send(page, "think where to begin\nwrite notes/deep/plan.txt first line\nsay exported answer")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'exported answer'")
    wait_idle(page)

    # -- the downloads (the session menu links to these) ---------------------------------------
    for link, kind in (("#export-json", "json"), ("#export-markdown", "markdown")):
        if page.locator(link).count():
            assert page.locator(link).get_attribute("href").endswith(f"/export/?format={kind}")
    base = f"{server.url}/api/sessions/{sid}/export/"
    markdown = page.request.get(f"{base}?format=markdown")
    assert markdown.ok and markdown.headers["content-type"].startswith("text/markdown")
    assert markdown.headers["content-disposition"].startswith("attachment; filename=")
    assert "## Assistant" in markdown.text() and "exported answer" in markdown.text()
    exported = page.request.get(f"{base}?format=json")
    assert exported.ok and "attachment" in exported.headers["content-disposition"]
    document = exported.json()
    assert document["format"] == "agentplat-session"
    path = tmp_path / "session.json"
    path.write_text(json.dumps(document))

    # -- the files and the changes (issue 26), as the menu and a message's moves offer them ----
    page.click("#session-menu summary")
    page.screenshot(path=str(SHOTS / "download-menu.png"))
    with page.expect_download() as got:
        page.click("#download-zip")
    assert _unzip(Path(got.value.path()).read_bytes()) == {"notes/deep/plan.txt": b"first line"}
    page.click("#session-menu summary")
    answer = page.locator("#messages .msg.assistant").last
    answer.hover()
    answer.screenshot(path=str(SHOTS / "download-here.png"))
    with page.expect_download() as got:
        answer.locator("a.download-here").click()
    assert _unzip(Path(got.value.path()).read_bytes()) == {"notes/deep/plan.txt": b"first line"}
    page.locator("#files button.file-link", has_text="notes/deep/plan.txt").click()
    page.wait_for_selector("#file-view:not([hidden])")
    with page.expect_download() as got:
        page.click("#file-download")
    assert got.value.suggested_filename == "plan.txt"
    assert Path(got.value.path()).read_bytes() == b"first line"
    patch = page.request.get(f"{server.url}/api/sessions/{sid}/patch/")
    assert patch.ok and "+first line" in patch.text()

    # -- a file that is not an export: the server's sentence, nothing made ---------------------
    page.goto(f"{server.url}/")
    sessions = page.locator("ul.sessions li[data-session-id]").count()
    bad = tmp_path / "not-an-export.json"
    bad.write_text('{"hello": "world"}')
    page.set_input_files("#import-file", str(bad))
    page.click("#import-session")
    page.wait_for_selector("#import-error:not([hidden])")
    assert "This is not a session export" in page.inner_text("#import-error")
    page.screenshot(path=str(SHOTS / "import-refused.png"), full_page=True)
    page.reload()
    assert page.locator("ul.sessions li[data-session-id]").count() == sessions

    # -- the export: a new session opens with the conversation and the files -------------------
    page.set_input_files("#import-file", str(path))
    page.click("#import-session")
    page.wait_for_url(lambda u: "/sessions/ses_" in u and f"/sessions/{sid}/" not in u)
    new = page.url.rstrip("/").rsplit("/", 1)[-1]
    wait_idle(page)
    page.wait_for_function(f"() => ({MESSAGES})().includes('exported answer')")
    text = page.evaluate(MESSAGES)
    assert "write notes/deep/plan.txt first line" in text
    page.locator("#files li", has_text="plan.txt").first.wait_for()
    assert files_on_disk(server, new) == {"notes/deep/plan.txt": "first line"}
    page.screenshot(path=str(SHOTS / "imported.png"), full_page=True)

    # -- and it goes on like any session -------------------------------------------------------
    send(page, "append notes/deep/plan.txt second line\nsay continued")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'continued'")
    wait_idle(page)
    assert files_on_disk(server, new) == {"notes/deep/plan.txt": "first linesecond line\n"}
    assert files_on_disk(server, sid) == {"notes/deep/plan.txt": "first line"}


def _unzip(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {i.filename: archive.read(i) for i in archive.infolist() if not i.is_dir()}
