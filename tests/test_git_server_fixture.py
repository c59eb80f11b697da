"""The test git server (tests/support/git_server.py) with plain git: HTTPS with its own
certificate, public and private repositories, push with a token, shallow clones."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.git_server import GitServer, git_server_fixture  # noqa: F401


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def git(
    server: GitServer, home: Path, *args: str, cwd: Path | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env=server.git_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check:
        assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc


def worktree_files(work: Path) -> dict[str, bytes]:
    return {
        p.relative_to(work).as_posix(): p.read_bytes()
        for p in work.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(work).parts
    }


FILES: dict[str, bytes | str] = {
    "README.md": "# hello\n",
    "src/app.py": "print('hi')\r\n",  # CRLF kept byte for byte
    "data/blob.bin": bytes(range(256)),
    ".gitignore": "*.bin\n",  # the server's repos ignore nothing of what they were given
}
EXPECTED = {k: v.encode() if isinstance(v, str) else v for k, v in FILES.items()}


def test_public_repo_clones_without_credentials(git_server: GitServer, home, tmp_path):
    url = git_server.make_repo("public", FILES, extra_commits=2)
    assert url == f"{git_server.base_url}/public.git"
    assert git_server.base_url.startswith("https://127.0.0.1:")

    work = tmp_path / "clone"
    git(git_server, home, "clone", "-q", url, str(work))

    assert worktree_files(work) == EXPECTED
    assert git_server.read_tree("public", "main") == EXPECTED
    assert git(git_server, home, "rev-list", "--count", "HEAD", cwd=work).stdout.strip() == "3"
    head = git(git_server, home, "rev-parse", "HEAD", cwd=work).stdout.strip()
    assert git_server.head("public", "main") == head
    assert git_server.head("public", "nope") is None
    assert git_server.head("absent", "main") is None
    seen = git_server.requests()
    assert seen and all(auth is None for _, _, auth in seen)
    assert all(r.status == 200 for r in git_server.seen())


def test_the_certificate_is_needed_and_names_localhost(git_server: GitServer, home, tmp_path):
    url = git_server.make_repo("public", FILES)
    env = git_server.git_env(home)
    del env["GIT_SSL_CAINFO"]
    untrusted = subprocess.run(
        ["git", "clone", "-q", url, str(tmp_path / "no")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert untrusted.returncode != 0
    assert "certificate" in untrusted.stderr.lower() or "ssl" in untrusted.stderr.lower()

    by_name = url.replace("127.0.0.1", "localhost")
    git(git_server, home, "clone", "-q", by_name, str(tmp_path / "named"))
    assert worktree_files(tmp_path / "named") == EXPECTED


def test_private_repo_needs_the_token(git_server: GitServer, home, tmp_path):
    url = git_server.make_repo("org/secret", FILES, private=True, branch="trunk")

    refused = git(git_server, home, "clone", url, str(tmp_path / "no"), check=False)
    assert refused.returncode != 0
    assert "could not read Username" in refused.stderr
    assert not (tmp_path / "no").exists()
    assert git_server.seen()[-1].status == 401

    wrong = git(
        git_server,
        home,
        "-c",
        "http.extraHeader=Authorization: Basic Z2l0Ondyb25n",  # git:wrong
        "clone",
        url,
        str(tmp_path / "wrong"),
        check=False,
    )
    assert wrong.returncode != 0

    git_server.clear_requests()
    work = tmp_path / "yes"
    git(
        git_server,
        home,
        "-c",
        f"http.extraHeader=Authorization: {git_server.auth_header()}",
        "clone",
        "-q",
        url,
        str(work),
    )
    assert worktree_files(work) == EXPECTED
    assert git(git_server, home, "branch", "--show-current", cwd=work).stdout.strip() == "trunk"
    seen = git_server.requests()
    assert seen and all(auth == git_server.auth_header() for _, _, auth in seen)
    assert all(path.startswith("/org/secret.git/") for _, path, _ in seen)


def test_push_needs_the_token_and_round_trips(git_server: GitServer, home, tmp_path):
    url = git_server.make_repo("public", FILES)
    work = tmp_path / "work"
    git(git_server, home, "clone", "-q", url, str(work))
    git(git_server, home, "switch", "-q", "-c", "feature", cwd=work)
    (work / "src" / "app.py").write_bytes(b"print('changed')\n")
    (work / "big.dat").write_bytes(os.urandom(3 * 1024 * 1024))  # > http.postBuffer: chunked
    (work / "README.md").unlink()
    git(git_server, home, "add", "-A", "-f", cwd=work)
    git(git_server, home, "commit", "-q", "-m", "feature", cwd=work)
    local_head = git(git_server, home, "rev-parse", "HEAD", cwd=work).stdout.strip()

    git_server.clear_requests()
    refused = git(git_server, home, "push", "origin", "feature", cwd=work, check=False)
    assert refused.returncode != 0
    assert git_server.head("public", "feature") is None
    assert git_server.requests() == [
        ("GET", "/public.git/info/refs?service=git-receive-pack", None)
    ]
    assert git_server.seen()[0].status == 401

    git_server.clear_requests()
    git(git_server, home, *git_server.auth_args(), "push", "-q", "origin", "feature", cwd=work)
    assert git_server.head("public", "feature") == local_head
    assert git_server.head("public", "main") != local_head
    assert git_server.read_tree("public", "feature") == worktree_files(work)
    assert git_server.read_tree("public", local_head) == worktree_files(work)
    assert git_server.read_tree("public", "main") == EXPECTED
    seen = git_server.seen()
    assert all(r.authorization == git_server.auth_header() for r in seen)
    pack = [r for r in seen if r.path == "/public.git/git-receive-pack"]
    assert pack and all(r.status == 200 for r in pack)
    # Git probes with a 4-byte "0000" first, then streams the pack in chunks.
    assert any(r.headers.get("Transfer-Encoding") == "chunked" for r in pack)

    # A private repository takes pushes with the token too.
    secret = git_server.make_repo("secret", {"a": "1"}, private=True)
    git(git_server, home, *git_server.auth_args(), "push", "-q", secret, "feature", cwd=work)
    assert git_server.head("secret", "feature") == local_head


def test_shallow_clone(git_server: GitServer, home, tmp_path):
    url = git_server.make_repo("deep", FILES, extra_commits=5)
    work = tmp_path / "shallow"
    git(git_server, home, "clone", "-q", "--depth", "1", url, str(work))
    assert (work / ".git" / "shallow").is_file()
    assert git(git_server, home, "rev-list", "--count", "HEAD", cwd=work).stdout.strip() == "1"
    assert worktree_files(work) == EXPECTED
    head = git(git_server, home, "rev-parse", "HEAD", cwd=work).stdout.strip()
    assert head == git_server.head("deep", "main")

    git(git_server, home, "fetch", "-q", "--unshallow", cwd=work)
    assert git(git_server, home, "rev-list", "--count", "HEAD", cwd=work).stdout.strip() == "6"


def test_gzip_request_bodies_reach_the_backend(git_server: GitServer, home, tmp_path):
    """A fetch with many local commits to offer sends its negotiation gzipped."""
    url = git_server.make_repo("busy", FILES)
    work = tmp_path / "work"
    git(git_server, home, "clone", "-q", url, str(work))
    for i in range(60):
        (work / "n.txt").write_text(f"{i}\n")
        git(git_server, home, "add", "n.txt", cwd=work)
        git(git_server, home, "commit", "-q", "-m", f"local {i}", cwd=work)
    other = tmp_path / "other"
    git(git_server, home, "clone", "-q", url, str(other))
    (other / "server.txt").write_text("new\n")
    git(git_server, home, "add", "server.txt", cwd=other)
    git(git_server, home, "commit", "-q", "-m", "upstream", cwd=other)
    git(git_server, home, *git_server.auth_args(), "push", "-q", "origin", "main", cwd=other)

    git_server.clear_requests()
    git(git_server, home, "fetch", "-q", "origin", cwd=work)
    upstream = git(git_server, home, "rev-parse", "origin/main", cwd=work).stdout.strip()
    assert upstream == git_server.head("busy", "main")
    gzipped = [r for r in git_server.seen() if r.headers.get("Content-Encoding") == "gzip"]
    assert gzipped and all(r.status == 200 for r in gzipped)
