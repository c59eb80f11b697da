"""A real git server over ssh for tests: OpenSSH's ``sshd`` serving bare repositories with
``git-shell``.

``ssh_git_server(tmp)`` starts ``/usr/sbin/sshd -D -e -f <config>`` on a free port of
127.0.0.1, with its own host key (made with ``ssh-keygen`` under ``tmp``), no PAM, no pid file
and ``AuthorizedKeysFile`` under ``tmp``; the login user is the user running the tests (root in
CI: ``PermitRootLogin prohibit-password``). Every authorized key is restricted
(``restrict,command="git-shell -c ..."``): it may run ``git-upload-pack`` /
``git-receive-pack`` and nothing else (no shell, no pty, no forwarding).

- ``make_repo(name, files)``: a bare repository made with plain git (commits in a work
  repository, which is then cloned ``--bare``) whose branch holds exactly ``files``; returns
  its URL, ``ssh://<user>@127.0.0.1:<port><absolute path>.git``.
- ``private_key`` / ``public_key``: a client key pair (ed25519, no passphrase) whose public
  half is authorized; ``head``, ``read_tree``: what a bare repository holds.

sshd needs its privilege-separation directory ``/run/sshd`` (made here if missing). In a test
module, ``from tests.support.ssh_server import ssh_git_server_fixture`` makes the fixture
``ssh_git_server`` (a started ``SshGitServer``) available.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
GIT = shutil.which("git") or "git"
GIT_SHELL = shutil.which("git-shell") or "/usr/bin/git-shell"
HOST = "127.0.0.1"
PRIVSEP_DIR = Path("/run/sshd")


def available() -> bool:
    return os.access(SSHD, os.X_OK) and shutil.which("ssh-keygen") is not None


@dataclass
class SshGitServer:
    host: str
    port: int
    user: str  # the login user (the one running the tests)
    root: Path  # where the bare repositories live: root / f"{name}.git"
    private_key: str  # the authorized client key (OpenSSH format, ends with a newline)
    public_key: str  # its public half, one line
    host_public_key: str  # the server's host key, one line ("ssh-ed25519 AAAA...")
    key_file: Path  # the client key on disk (mode 0600), for plain ssh/git
    log_file: Path  # sshd's stderr (-e)
    _home: Path

    # -- repositories ---------------------------------------------------------------------

    def bare(self, name: str) -> Path:
        parts = name.split("/")
        if not name or any(p in ("", ".", "..") for p in parts) or name.endswith(".git"):
            raise ValueError(f"bad repository name {name!r}")
        return self.root / f"{name}.git"

    def url(self, name: str) -> str:
        return f"ssh://{self.user}@{self.host}:{self.port}{self.bare(name)}"

    def make_repo(
        self,
        name: str,
        files: dict[str, bytes | str],
        *,
        branch: str = "main",
        extra_commits: int = 0,
    ) -> str:
        """A bare repository whose ``branch`` (its HEAD too) holds exactly ``files``, after
        ``extra_commits`` earlier commits (each ``files`` plus a ``.history`` counter)."""
        bare = self.bare(name)
        if bare.exists():
            raise FileExistsError(bare)
        work = self._home / "work" / name
        work.mkdir(parents=True)
        self._git("init", "-q", f"--initial-branch={branch}", str(work))
        for i in range(extra_commits + 1):
            final = i == extra_commits
            for path in [p for p in work.rglob("*") if ".git" not in p.relative_to(work).parts]:
                if path.is_file():
                    path.unlink()
            content = dict(files) if final else {**files, ".history": f"{i + 1}\n"}
            for rel, data in content.items():
                target = work / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data.encode() if isinstance(data, str) else data)
            self._git("-C", str(work), "add", "-A")
            message = "files" if final else f"history {i + 1}"
            self._git("-C", str(work), "commit", "-q", "--allow-empty", "-m", message)
        bare.parent.mkdir(parents=True, exist_ok=True)
        self._git("clone", "-q", "--bare", str(work), str(bare))
        self._git("--git-dir", str(bare), "remote", "remove", "origin")
        shutil.rmtree(work)
        return self.url(name)

    def head(self, name: str, branch: str) -> str | None:
        """The commit id of ``branch`` in the bare repository, None if absent."""
        out = self._git(
            "--git-dir", str(self.bare(name)), "rev-parse", "-q", "--verify",
            f"refs/heads/{branch}^{{commit}}", check=False,
        )  # fmt: skip
        return out.decode().strip() or None

    def read_tree(self, name: str, ref: str) -> dict[str, bytes]:
        """Every regular file of ``ref``: path -> bytes."""
        git_dir = str(self.bare(name))
        listing = self._git("--git-dir", git_dir, "ls-tree", "-r", "-z", "--full-tree", ref)
        tree: dict[str, bytes] = {}
        for record in listing.split(b"\0"):
            if not record:
                continue
            meta, _, path = record.partition(b"\t")
            _mode, kind, oid = meta.decode().split()
            if kind == "blob":
                tree[path.decode()] = self._git("--git-dir", git_dir, "cat-file", "blob", oid)
        return tree

    # -- for plain git clients ------------------------------------------------------------

    def git_env(self, home: Path) -> dict[str, str]:
        """An environment for plain git that reaches this server with ``key_file`` and
        trusts its host key."""
        home.mkdir(parents=True, exist_ok=True)
        known = home / "known_hosts"
        known.write_text(f"[{self.host}]:{self.port} {self.host_public_key}\n")
        env = self._env()
        env["HOME"] = str(home)
        env["GIT_SSH_COMMAND"] = (
            f"ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o IdentityFile=none "
            f"-o UserKnownHostsFile={known} -o StrictHostKeyChecking=yes -i {self.key_file}"
        )
        return env

    # -- internals ------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self._home),
            "LANG": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "Test",
            "GIT_AUTHOR_EMAIL": "test@example.invalid",
            "GIT_COMMITTER_NAME": "Test",
            "GIT_COMMITTER_EMAIL": "test@example.invalid",
        }

    def _git(self, *args: str, check: bool = True) -> bytes:
        proc = subprocess.run([GIT, *args], capture_output=True, env=self._env(), timeout=120)
        if check and proc.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.decode(errors='replace')}")
        return proc.stdout if proc.returncode == 0 else b""


# -- lifetime -----------------------------------------------------------------------------


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=60,
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def _banner(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1) as conn:
            conn.settimeout(2)
            return conn.recv(64).startswith(b"SSH-2.0-")
    except OSError:
        return False


def _config(port: int, user: str, host_key: Path, authorized: Path) -> str:
    return "\n".join(
        [
            f"Port {port}",
            f"ListenAddress {HOST}",
            f"HostKey {host_key}",
            "PidFile none",
            "UsePAM no",
            "StrictModes no",
            "PermitRootLogin prohibit-password",
            f"AllowUsers {user}",
            f"AuthorizedKeysFile {authorized}",
            "AuthorizedPrincipalsFile none",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "HostbasedAuthentication no",
            "AllowTcpForwarding no",
            "AllowAgentForwarding no",
            "X11Forwarding no",
            "PermitTunnel no",
            "PermitTTY no",
            "PermitUserRC no",
            "PrintMotd no",
            "AcceptEnv GIT_PROTOCOL",
            "MaxStartups 100",
            "LogLevel VERBOSE",
            "",
        ]
    )


@contextmanager
def ssh_git_server(tmp: Path) -> Iterator[SshGitServer]:
    """A started sshd over ``tmp / "ssh-server"``; stopped on exit."""
    if not available():
        raise RuntimeError(f"{SSHD} is not installed (apt-get install openssh-server)")
    base = Path(tmp) / "ssh-server"
    root, home, keys = base / "repos", base / "home", base / "keys"
    for directory in (root, home, keys):
        directory.mkdir(parents=True, exist_ok=True)
    keys.chmod(0o700)
    if not PRIVSEP_DIR.is_dir():
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    host_key, client_key = keys / "ssh_host_ed25519_key", keys / "client_ed25519"
    _keygen(host_key, "test-host")
    _keygen(client_key, "test-client")
    public = client_key.with_suffix(".pub").read_text().strip()
    authorized = keys / "authorized_keys"
    authorized.write_text(
        f'restrict,command="{GIT_SHELL} -c \\"$SSH_ORIGINAL_COMMAND\\"" {public}\n'
    )
    authorized.chmod(0o600)
    user = pwd.getpwuid(os.getuid()).pw_name
    log_file = base / "sshd.log"
    proc: subprocess.Popen | None = None
    port = 0
    for _attempt in range(5):  # the free port may be taken again before sshd binds it
        port = _free_port()
        config = base / "sshd_config"
        config.write_text(_config(port, user, host_key, authorized))
        with open(log_file, "ab") as log:
            proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and proc.poll() is None and not _banner(port):
            time.sleep(0.05)
        if proc.poll() is None and _banner(port):
            break
        _stop(proc)
        proc = None
    if proc is None:
        raise RuntimeError(f"sshd did not start: {log_file.read_text(errors='replace')[-2000:]}")
    server = SshGitServer(
        host=HOST,
        port=port,
        user=user,
        root=root,
        private_key=client_key.read_text(),
        public_key=public,
        host_public_key=" ".join(host_key.with_suffix(".pub").read_text().split()[:2]),
        key_file=client_key,
        log_file=log_file,
        _home=home,
    )
    try:
        yield server
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """sshd and the per-connection processes it forked (its own process group)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(name="ssh_git_server")
def ssh_git_server_fixture(tmp_path: Path) -> Iterator[SshGitServer]:
    """A started ``SshGitServer`` for one test (import this name; request
    ``ssh_git_server``)."""
    with ssh_git_server(tmp_path) as server:
        yield server
