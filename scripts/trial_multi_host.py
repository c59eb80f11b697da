"""Issue 45's trial as an operator runs it (docs/operations.md "Several worker hosts"): two
worker hosts, a session cloned from a repository on one of them, that host lost mid-run (every
process SIGKILLed, its disk deleted), the session finished on the other, all seen in Chromium.

    DATABASE_URL=postgres://…/db REDIS_URL=redis://…/n SECRET_KEY=… \\
        .venv/bin/python -m scripts.trial_multi_host [--shots /tmp] [--keep DIR] [--docs docs/img]

It migrates the database it is given, then starts what tests/e2e/test_multi_host.py starts:
the central store and the repository to clone on a real https git server
(tests/support/git_server.py), a Daphne web with ``WORKSPACE_ROOT=""``, and two Celery worker
hosts ``alpha`` and ``beta`` (tests/e2e/hosts_harness.py: each its own ``WORKSPACE_ROOT`` and
network namespace where this machine allows one). In the browser it logs in as a superuser,
makes a session from the repository's URL on the sessions page, waits for the clone, sends a
scripted prompt with a slow step, kills the session's host in the middle of that step, and
watches the run end on the other host; then it opens the files in the viewer and the admin's
Hosts page. A screenshot at each stage (``<shots>/trial-*.png``); it exits non-zero on the
first expectation that fails, after printing the processes' logs. ``--docs docs/img`` also
writes the three pictures docs/operations.md shows (8-bit palette PNGs, as scripts/screenshots.py
makes them); use an empty database for those (the sidebar lists every session of the user).
"""

from __future__ import annotations

import argparse
import base64
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

from playwright.sync_api import Page, sync_playwright

from scripts.screenshots import QUANTIZE, png8
from tests.e2e.hosts_harness import HostSet
from tests.e2e.stack import BIN, ROOT, Processes, base_env
from tests.support.git_server import GitServer, git_server

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
LEASE = 6  # a beat every 3 s: a host is dead 6 s after its last
REPO = {"README.md": "# tool\n", "src/main.py": "print('v1')\n", "docs/notes.txt": "notes\n"}
# Step 1 writes two files and ends (replicated); step 2 writes d.txt and waits: the host dies
# there. The step is interrupted (its write went with the disk) and the run goes on with step 3.
SCRIPT = (
    "write a.txt A1\nwrite sub/b.txt B1\n"
    "say waiting\nwrite d.txt D1\nwait 20\n"
    "say resumed on the other host\nwrite c.txt C1\nsay done"
)
EXPECTED = {*REPO, "a.txt", "sub/b.txt", "c.txt"}
USER, PASSWORD = "operator", "operator-password"
# The stages docs/operations.md "Several worker hosts" shows (``--docs``): docs/img/<name>.png.
DOC_SHOTS = {
    "running": "multi-host-running",
    "interrupted-call": "multi-host-resumed",
    "admin-hosts": "multi-host-admin-hosts",
}


def wait(what: str, check: Callable[[], object], timeout: float = 60) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def django_setup() -> None:
    """The ORM of the database the stack uses (migrated first)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("ALLOW_ROOT", "true")
    # Playwright's sync API runs its own event loop in this thread; the ORM reads here are
    # the script's own, between the browser's steps.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    subprocess.run([str(BIN / "python"), "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    import django  # noqa: PLC0415 - the settings need the environment set above

    django.setup()


class Trial:
    """The stack (store, web, two hosts) and the browser's page."""

    def __init__(
        self, procs: Processes, tmp: Path, store: GitServer, shots: Path, docs: Path | None
    ) -> None:
        self.procs, self.tmp, self.store, self.shots, self.docs = procs, tmp, store, shots, docs
        store.make_repo("central", {"README": "the central store\n"})
        self.repo_url = store.make_repo("team/tool", REPO, extra_commits=1)
        self.env = base_env(
            DATABASE_URL=os.environ["DATABASE_URL"],
            REDIS_URL=os.environ["REDIS_URL"],
            RUN_LEASE_SECONDS=str(LEASE),
            SNAPSHOT_REMOTE=store.url("central"),
            SNAPSHOT_REMOTE_TOKEN=store.token,
            GIT_SSL_CAINFO=str(store.ca_file),
            GIT_ALLOWED_HOSTS="127.0.0.1",
            SCRIPTED_DEFAULT_PACE_MS="50",
        )
        self.web_env = {**self.env, "WORKSPACE_ROOT": "", "MIRROR_ROOT": str(tmp / "mirror")}
        self.url = "http://" + procs.daphne(self.web_env, tmp)
        ports = [urlparse(self.env[k]).port for k in ("DATABASE_URL", "REDIS_URL")]
        ports = [ports[0] or 5432, ports[1] or 6379, urlparse(store.base_url).port]
        self.hosts = HostSet(procs, self.env, tmp, ports)
        print(f"web {self.url}; hosts in network namespaces: {self.hosts.isolated}")
        self.page: Page | None = None
        self.blank: Page | None = None  # where a picture is quantized (no page's CSP)
        self.n = 0

    def shot(self, stage: str, *, full: bool = False) -> None:
        self.n += 1
        path = self.shots / f"trial-{self.n}-{stage}.png"
        png = self.page.screenshot(path=str(path), full_page=full, timeout=90_000)  # a busy machine
        print(f"  screenshot {path}")
        if self.docs is not None and stage in DOC_SHOTS:
            image = self.blank.evaluate(QUANTIZE, base64.b64encode(png).decode())
            pixels = base64.b64decode(image["pixels"])
            doc = self.docs / f"{DOC_SHOTS[stage]}.png"
            doc.write_bytes(png8(image["width"], image["height"], image["palette"], pixels))
            print(f"  for the docs: {doc}")


def live() -> set[str]:
    from sessions_app import hosts  # noqa: PLC0415 - after django.setup()

    return set(hosts.live_hosts().values_list("name", flat=True))


def session(sid: str):  # noqa: ANN201 - a Session
    from sessions_app.models import Session  # noqa: PLC0415 - after django.setup()

    return Session.objects.get(id=sid)


def last_run(sid: str):  # noqa: ANN201 - a Run or None
    from runs_app.models import Run  # noqa: PLC0415 - after django.setup()

    return Run.objects.filter(session_id=sid).order_by("-created_at").first()


def make_user() -> None:
    from django.contrib.auth.models import User  # noqa: PLC0415 - after django.setup()

    if not User.objects.filter(username=USER).exists():
        User.objects.create_superuser(USER, "op@example.invalid", PASSWORD)


def login(t: Trial) -> None:
    t.page.goto(f"{t.url}/login/")
    t.page.fill("input[name=username]", USER)
    t.page.fill("input[name=password]", PASSWORD)
    t.page.click("button[type=submit]")
    t.page.wait_for_url(f"{t.url}/")


def clone(t: Trial) -> str:
    """A session from the repository's URL on the sessions page; its id once cloned."""
    page = t.page
    page.goto(f"{t.url}/?new=1")
    page.fill("#clone-url", t.repo_url)
    t.shot("new-from-repository")
    page.click("#clone-submit")
    page.wait_for_url("**/sessions/ses_*/")
    sid = page.url.rstrip("/").rsplit("/", 1)[-1]
    t.shot("cloning")
    page.wait_for_function(
        "() => document.getElementById('messages').innerText.includes('Cloned')", timeout=90_000
    )
    idle(page)
    page.locator("#files li", has_text="src/main.py").wait_for()
    t.shot("cloned")
    print(f"session {sid} cloned on {session(sid).host}")
    return sid


def idle(page: Page, timeout: float = 90_000) -> None:
    page.wait_for_function(
        "() => document.getElementById('status').textContent.trim() === 'idle'", timeout=timeout
    )


def run_and_kill(t: Trial, sid: str) -> tuple[str, str]:
    """The slow prompt sent; its host killed mid step 2. Returns (killed, other)."""
    home = session(sid).host
    other = "beta" if home == "alpha" else "alpha"
    t.page.fill("#prompt", SCRIPT)
    t.page.click("#send")

    def mid_step_two() -> bool:
        run = last_run(sid)
        files = t.hosts.files(home, sid)
        return bool(run and run.status == "running" and "d.txt" in files and "a.txt" in files)

    wait("step 2 to begin on the home host", mid_step_two, 90)
    wait("step 1 replicated", lambda: session(sid).replicated_snapshot, 30)
    t.page.locator("#files li", has_text="sub/b.txt").wait_for()
    print(f"run {last_run(sid).id} on {last_run(sid).host}; killing {home}")
    t.shot("running")
    t.hosts.kill(home)
    assert not t.hosts.hosts[home].root.exists()
    t.page.wait_for_timeout(2000)
    t.shot(f"{home}-killed")
    return home, other


def after_kill(t: Trial, sid: str, killed: str, other: str) -> None:
    """The run ends on the other host; the chat, files and admin's Hosts page checked."""
    started = time.monotonic()
    run = wait("the run to end", lambda: _ended(sid), 120)
    print(f"run ended {run.status} on {run.host} {time.monotonic() - started:.1f} s after kill")
    assert run.status == "completed", (run.status, run.error)
    assert run.host == other and session(sid).host == other
    idle(t.page)
    t.page.wait_for_timeout(1000)
    t.shot(f"finished-on-{other}")
    lost = t.page.locator("#messages .tool", has_text="d.txt").first
    lost.scroll_into_view_if_needed()
    t.shot("interrupted-call")
    print("the call running when the host died:", lost.inner_text()[:300])
    on_disk = set(t.hosts.files(other, sid))
    print(f"files on {other}: {sorted(on_disk)}")
    assert on_disk == EXPECTED, on_disk
    files(t, sid)
    hosts_page(t, sid, killed, other)


def _ended(sid: str):  # noqa: ANN202 - a Run or None
    run = last_run(sid)
    return run if run and run.status in ("completed", "error", "cancelled") else None


def files(t: Trial, sid: str) -> None:
    """The files panel after a reload (what a user opening the session sees)."""
    page = t.page
    page.reload()
    idle(page)
    if page.is_visible("#files-toggle"):
        page.click("#files-toggle")
    page.locator("#files li", has_text="c.txt").wait_for()
    shown = page.evaluate(
        "() => [...document.querySelectorAll('#files li[data-path]')].map(li => li.dataset.path)"
    )
    print(f"files listed in the browser: {sorted(shown)}")
    page.locator("#files li", has_text="src/main.py").get_by_role("button").first.click()
    page.locator("#file-view pre").wait_for()
    t.shot("files")
    assert set(shown) >= EXPECTED, shown
    assert "d.txt" not in shown, shown


def hosts_page(t: Trial, sid: str, killed: str, other: str) -> None:
    page = t.page
    page.goto(f"{t.url}/admin/sessions_app/host/")
    t.shot("admin-hosts")
    rows = page.locator("#result_list tbody tr")
    text = {r.locator("th").first.inner_text(): r.inner_html() for r in rows.all()}
    assert "icon-no" in text[killed] and "icon-yes" in text[other], text
    page.goto(f"{t.url}/admin/sessions_app/session/?host={other}")
    t.shot(f"admin-sessions-on-{other}")
    assert sid in page.content()


def trial(t: Trial) -> None:
    make_user()
    t.hosts.start("alpha")
    t.hosts.start("beta")
    wait("both hosts to beat", lambda: live() == {"alpha", "beta"}, 60)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        context.set_default_timeout(30_000)
        t.page = context.new_page()
        t.blank = context.new_page()
        problems: list[str] = []
        t.page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
        t.page.on(
            "response",
            lambda r: r.status >= 500 and problems.append(f"{r.status} {r.url}"),
        )
        try:
            login(t)
            sid = clone(t)
            killed, other = run_and_kill(t, sid)
            after_kill(t, sid, killed, other)
        except Exception:
            t.shot("failure", full=True)
            raise
        finally:
            print("browser problems:", problems or "none")
            browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shots", type=Path, default=Path("/tmp"))
    parser.add_argument("--keep", type=Path, help="a folder for the logs and disks (kept)")
    parser.add_argument("--docs", type=Path, help="also write the docs' pictures there")
    options = parser.parse_args()
    django_setup()
    tmp = options.keep or Path(tempfile.mkdtemp(prefix="agentplat-trial-"))
    tmp.mkdir(parents=True, exist_ok=True)
    procs = Processes()
    ok = False
    with git_server(tmp / "store") as store:
        t = Trial(procs, tmp, store, options.shots, options.docs)
        try:
            trial(t)
            ok = True
        finally:
            t.hosts.close()
            procs.stop()
            if not ok:
                print(procs.logs())
            print(f"logs in {tmp}")
    print("trial passed" if ok else "trial FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
