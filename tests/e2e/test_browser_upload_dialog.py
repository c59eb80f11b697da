"""Issue 46, point 14, in the browser: an upload asks before it creates its session. Choosing
an archive opens a dialog with the session's name (the archive's name without its extension)
and, when everything sits in one top-level folder (``proj/``), "Drop the top folder proj/"
(on by default); nothing is created until "Create session", and Cancel creates nothing. The
listing is read in the browser: a zip's directory, a .tar.gz through DecompressionStream.
Screenshots at 1280 and 390, light and dark."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from .ui import files_on_disk, login

pytestmark = pytest.mark.timeout(180)

SHOTS = Path(os.environ.get("CHAT_SCREENSHOT", "/tmp/chat.png")).parent
DIALOG = "#upload-dialog"


def _zip(path: Path, members: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return path


def _tgz(path: Path, members: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _sessions(page, server) -> set[str]:
    answer = page.request.get(f"{server.url}/api/sessions/?limit=100").json()
    return {s["id"] for s in answer["results"]}


def _choose(page, server, archive: Path) -> None:
    page.goto(f"{server.url}/?new=1")
    page.set_input_files("#upload-file", str(archive))
    page.wait_for_selector(f"{DIALOG}[open]")


def test_an_archive_asks_its_name_and_drops_its_top_folder(page, server, tmp_path):
    login(page, server)
    before = _sessions(page, server)
    _choose(page, server, _zip(tmp_path / "proj.zip", {"proj/a.txt": "A", "proj/src/b.py": "B"}))
    assert page.input_value("#upload-name") == "proj"
    strip = page.locator("#upload-strip")
    assert strip.is_checked()
    assert " ".join(page.locator(f"{DIALOG} label.upload-strip").inner_text().split()) == (
        "Drop the top folder proj/"
    )
    page.screenshot(path=str(SHOTS / "upload-dialog-1280-light.png"))
    assert _sessions(page, server) == before  # asked first: nothing made yet
    page.fill("#upload-name", "My project")
    page.click("#upload-create")
    page.wait_for_url("**/sessions/ses_*/")
    sid = page.url.rstrip("/").rsplit("/", 1)[-1]
    assert files_on_disk(server, sid) == {"a.txt": "A", "src/b.py": "B"}
    assert page.request.get(f"{server.url}/api/sessions/{sid}/").json()["title"] == "My project"


def test_unticked_the_top_folder_stays_and_cancel_creates_nothing(page, server, tmp_path):
    login(page, server)
    archive = _tgz(tmp_path / "site.tar.gz", {"site/index.html": "<p>", "site/css/a.css": "p{}"})
    before = _sessions(page, server)
    _choose(page, server, archive)
    assert page.input_value("#upload-name") == "site"
    assert page.locator("#upload-strip").is_checked()  # read through the gzip stream
    page.click("#upload-cancel")
    page.wait_for_selector(DIALOG, state="detached")
    assert "/sessions/" not in page.url
    assert _sessions(page, server) == before
    # The same archive again: asked again; unticked, the folder stays.
    page.set_input_files("#upload-file", str(archive))
    page.wait_for_selector(f"{DIALOG}[open]")
    page.uncheck("#upload-strip")
    page.click("#upload-create")
    page.wait_for_url("**/sessions/ses_*/")
    sid = page.url.rstrip("/").rsplit("/", 1)[-1]
    assert files_on_disk(server, sid) == {"site/index.html": "<p>", "site/css/a.css": "p{}"}


def test_an_archive_with_several_entries_at_its_top_offers_no_drop(page, server, tmp_path):
    login(page, server)
    _choose(page, server, _zip(tmp_path / "mixed.zip", {"README": "r", "notes/a.txt": "a"}))
    assert page.input_value("#upload-name") == "mixed"
    assert page.locator("#upload-strip").count() == 0
    page.click("#upload-create")
    page.wait_for_url("**/sessions/ses_*/")
    sid = page.url.rstrip("/").rsplit("/", 1)[-1]
    assert files_on_disk(server, sid) == {"README": "r", "notes/a.txt": "a"}


@pytest.mark.parametrize(("width", "scheme"), [(390, "dark"), (390, "light"), (1280, "dark")])
def test_the_dialog_fits_the_window(page, server, tmp_path, width, scheme):
    page.set_viewport_size({"width": width, "height": 844 if width == 390 else 800})
    page.emulate_media(color_scheme=scheme)
    login(page, server)
    name = "a-project-with-a-rather-long-name-indeed"
    _choose(page, server, _zip(tmp_path / f"{name}.zip", {f"{name}/a.txt": "A"}))
    page.screenshot(path=str(SHOTS / f"upload-dialog-{width}-{scheme}.png"))
    for selector in (DIALOG, "#upload-name", "#upload-create", "#upload-cancel", "#upload-strip"):
        box = page.locator(selector).bounding_box()
        assert box is not None, selector
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, (selector, box)
    page.keyboard.press("Escape")
    page.wait_for_selector(DIALOG, state="detached")


def test_a_folder_asks_too_and_drops_its_own_name(page, server, tmp_path):
    # A chosen folder: its files' paths all start with its name; the dialog offers to drop it.
    folder = tmp_path / "webapp"
    (folder / "src").mkdir(parents=True)
    (folder / "index.html").write_text("<p>")
    (folder / "src" / "app.js").write_text("go()")
    login(page, server)
    before = _sessions(page, server)
    page.goto(f"{server.url}/?new=1")
    page.set_input_files("#upload-folder", str(folder))
    page.wait_for_selector(f"{DIALOG}[open]")
    assert page.input_value("#upload-name") == "webapp"
    assert page.locator("#upload-strip").is_checked()
    assert "2 files from the folder webapp" in page.inner_text(f"{DIALOG} .upload-what")
    assert _sessions(page, server) == before
    page.click("#upload-create")
    page.wait_for_url("**/sessions/ses_*/")
    sid = page.url.rstrip("/").rsplit("/", 1)[-1]
    assert files_on_disk(server, sid) == {"index.html": "<p>", "src/app.js": "go()"}
