"""A repository in the browser, as a user does it (issue 26): save a token on the Credentials
page, start a session from a private repository on the list page, watch it clone (services
mode: the Celery worker runs the clone), let the agent change a file, push the work as a
new branch from the session menu, then clone that branch back with plain git and compare its
files with the worktree's. Then an archive upload from the list page."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tempfile
import uuid
import zipfile
from pathlib import Path

import pytest

from tests.support.git_server import git_server

from .stack import ServicesServer, services_available
from .ui import LAST_ASSISTANT_TEXT, files_on_disk, login, send, wait_idle

pytestmark = pytest.mark.timeout(300)
SHOTS = Path(os.environ.get("CHAT_SCREENSHOT", "/tmp/chat.png")).parent
FILES = {"README.md": "# tool\n", "src/main.py": "print('v1')\n"}


@pytest.fixture
def stack(tmp_path):  # noqa: ANN201
    if not services_available():
        pytest.skip("services mode (PostgreSQL, Redis) is not available")
    with git_server(tmp_path) as repos:
        tmp = Path(tempfile.mkdtemp(prefix=f"agentplat-e2e-repo-{uuid.uuid4().hex[:6]}-"))
        srv = ServicesServer(tmp)
        srv.env.update(GIT_ALLOWED_HOSTS="127.0.0.1", GIT_SSL_CAINFO=str(repos.ca_file))
        try:
            srv.start()
            yield srv, repos
        finally:
            srv.stop()
            shutil.rmtree(tmp, ignore_errors=True)


def test_clone_work_push_and_clone_back_in_the_browser(browser, stack, tmp_path):
    srv, repos = stack
    url = repos.make_repo("team/tool", FILES, private=True, extra_commits=2)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    try:
        login(page, srv)
        # -- a credential, saved once and never shown back ------------------------------------
        page.click("#credentials-link")
        page.fill("input[name=name]", "local git")
        page.fill("input[name=host]", "127.0.0.1")
        page.fill("input[name=port]", repos.base_url.rsplit(":", 1)[1])
        page.fill("textarea[name=secret]", repos.token)
        page.click("#credential-save")
        page.wait_for_selector("#credentials tr[data-credential-id]")
        assert repos.token not in page.content()

        # -- New session from a repository ---------------------------------------------------
        page.goto(f"{srv.url}/?new=1")
        page.wait_for_function(
            "() => document.querySelectorAll('#clone-credential option').length > 1"
        )
        page.fill("#clone-url", url)
        page.select_option("#clone-credential", index=1)
        page.click("#clone-submit")
        page.wait_for_url("**/sessions/ses_*/")
        sid = page.url.rstrip("/").rsplit("/", 1)[-1]
        page.wait_for_function(
            "() => document.getElementById('source').textContent.includes('@')", timeout=60_000
        )
        page.wait_for_function(
            "() => document.getElementById('messages').innerText.includes('Cloned')"
        )
        wait_idle(page)
        head = repos.head("team/tool", "main")
        assert head[:12] in page.inner_text("#source")
        page.screenshot(path=str(SHOTS / "repository-cloned.png"))
        assert {
            k: v for k, v in files_on_disk(srv, sid).items() if not k.startswith(".git/")
        } == FILES

        # -- the agent's change, pushed as a new branch --------------------------------------
        send(page, "Bump the version\nwrite src/main.py print('v2')\nsay bumped")
        page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'bumped'")
        wait_idle(page)
        page.click("#session-menu summary")
        page.fill("#push-branch", "agent/bump")
        page.select_option("#push-credential", index=1)
        page.click("#push")
        page.wait_for_function(
            "() => document.getElementById('push-result').textContent.startsWith('Pushed')"
        )
        page.screenshot(path=str(SHOTS / "repository-pushed.png"))
        pushed = repos.head("team/tool", "agent/bump")
        assert pushed and pushed[:12] in page.inner_text("#push-result")

        # -- cloned back with plain git: the worktree's files, exactly ----------------------
        back = tmp_path / "back"
        subprocess.run(
            ["git", *repos.auth_args(), "clone", "-q", "--branch", "agent/bump", url, str(back)],
            env=repos.git_env(tmp_path), check=True, capture_output=True,
        )  # fmt: skip
        cloned = {
            p.relative_to(back).as_posix(): p.read_text()
            for p in back.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(back).parts
        }
        assert cloned == {**FILES, "src/main.py": "print('v2')"}

        # -- an archive upload from the list page --------------------------------------------
        archive = tmp_path / "site.zip"
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("site/index.html", "<h1>hi</h1>")
            zf.writestr("site/css/a.css", "h1{}")
        page.goto(f"{srv.url}/?new=1")
        page.set_input_files("#upload-file", str(archive))
        page.uncheck("#upload-strip")  # the upload asks first (issue 46): keep site/
        page.click("#upload-create")
        page.wait_for_url("**/sessions/ses_*/")
        page.wait_for_function(
            "() => document.getElementById('messages').innerText.includes('Uploaded')"
        )
        uploaded = page.url.rstrip("/").rsplit("/", 1)[-1]
        assert files_on_disk(srv, uploaded) == {
            "site/index.html": "<h1>hi</h1>",
            "site/css/a.css": "h1{}",
        }
        # A refused archive: the server's sentence under the form, no session made.
        bad = io.BytesIO()
        with zipfile.ZipFile(bad, "w") as zf:
            zf.writestr("../escape.txt", "x")
        (tmp_path / "bad.zip").write_bytes(bad.getvalue())
        page.goto(f"{srv.url}/?new=1")
        page.set_input_files("#upload-file", str(tmp_path / "bad.zip"))
        page.click("#upload-create")
        page.wait_for_selector("#new-from-error:not([hidden])")
        assert page.inner_text("#new-from-error")
    except Exception:
        print(srv.logs())
        page.screenshot(path=str(SHOTS / "repository-failure.png"), full_page=True)
        raise
    finally:
        context.close()
    assert not problems, problems
