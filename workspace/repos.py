"""Git remotes: the URL check, and the one runner of a git that talks to a remote (a clone, a
push). Everything here treats the repository as hostile (docs/semantics.md §11, §13):

* **Where git may go.** Only ``https``, ``ssh`` and ``git`` URLs (``check_url``); every
  other transport is off (``protocol.allow=never``, the three allowed one by one), and so
  are redirects. The host's addresses are resolved here and refused when one is loopback,
  private, link-local or otherwise not global, unless ``GIT_ALLOWED_HOSTS`` names the host;
  git is then pinned to the addresses that were checked (``http.curloptResolve`` for https,
  the address itself in the URL for ssh and git), so a second lookup cannot lead elsewhere.
* **What git may run.** The environment is git's alone: no system or global config, an
  empty ``HOME``, no askpass, no credential helper, hooks pointed at ``/dev/null``, no
  fsmonitor, no submodules, no attributes file of ours. A clone is made in a staging
  directory whose config is the server's; the repository's own ``.git/config`` only comes
  into being as the clone's and is never read by a server git afterwards: a push runs in the
  session's snapshot store, never in the worktree's ``.git``.
* **The user's secret.** A token travels as an ``http.extraHeader`` given through git's
  environment (``GIT_CONFIG_COUNT``), never on a command line (``/proc/<pid>/cmdline``) and
  never in a file of the worktree; a deploy key is written to a file of mode 0600 in a
  temporary directory outside every worktree, removed when git ends. Neither is logged, and
  git's own error text is scrubbed of it before anyone sees it.
* **Bounds.** Wall time (``REPO_CLONE_TIMEOUT``), what git reports it received and the files
  it checks out (``REPO_MAX_BYTES``, ``REPO_MAX_FILES``), read from its progress as it goes;
  past any of them git's process group is killed.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

from django.conf import settings

SCHEMES = {"https": 443, "ssh": 22, "git": 9418}
SCP_LIKE = re.compile(r"^(?P<user>[^@/:]+)@(?P<host>[A-Za-z0-9.-]+):(?P<path>[^/].*)$")
SSH_USER = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,63}$")
LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST_NAME = re.compile(rf"^(?=.{{1,253}}$){LABEL}(?:\.{LABEL})*$")
URL_MAX = 2000
PROGRESS = re.compile(
    r"(?:remote: )?(?P<phase>[A-Za-z][A-Za-z ]+):\s+\d+% \((?P<done>\d+)/(?P<total>\d+)\)"
    r"(?:, (?P<size>[\d.]+) (?P<unit>bytes|KiB|MiB|GiB))?"
)
UNITS = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


class RepoError(Exception):
    """A clone, push or URL refused or failed: ``str(exc)`` is one sentence for the user."""


class RepoLimitError(RepoError):
    pass


class RepoCancelled(RepoError):
    pass


class PushRejected(RepoError):
    """The remote refused the update (the branch exists and would not fast-forward)."""


@dataclass(frozen=True)
class Remote:
    url: str  # as the user gave it, normalised (what is stored and shown; never a secret)
    scheme: str
    host: str
    port: int
    addresses: tuple[str, ...]  # the checked addresses git is pinned to

    @property
    def pinned_url(self) -> str:
        """The URL git is given: for ssh and git, the checked address in place of the name."""
        if self.scheme == "https" or not self.addresses:
            return self.url
        parts = urlsplit(self.url)
        address = self.addresses[0]
        host = f"[{address}]" if ":" in address else address
        userinfo = f"{parts.username}@" if parts.username else ""
        netloc = f"{userinfo}{host}:{self.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))

    def config(self) -> list[tuple[str, str]]:
        if self.scheme == "https" and self.addresses:
            entries = ",".join(f"[{a}]" if ":" in a else a for a in self.addresses)
            return [("http.curloptResolve", f"{self.host}:{self.port}:{entries}")]
        return []


def _allowed(host: str, port: int) -> bool:
    allowed = settings.GIT_ALLOWED_HOSTS
    return host in allowed or f"{host}:{port}" in allowed


def check_url(url: object, *, trusted: bool = False) -> Remote:
    """The remote ``url`` names, or ``RepoError`` saying why it is refused (before any
    connection is made). ``trusted``: the operator's own URL (``SNAPSHOT_REMOTE``), which may
    lead to a private address."""
    if not isinstance(url, str) or not url.strip():
        raise RepoError("url must be a repository URL (https://, ssh:// or git://).")
    url = url.strip()
    if len(url) > URL_MAX or any(ord(c) < 0x21 or c == "\x7f" for c in url):
        raise RepoError("url must be one line without spaces or control characters.")
    scp = SCP_LIKE.match(url)
    if scp and "://" not in url:
        url = f"ssh://{scp['user']}@{scp['host']}/{scp['path']}"
    if "::" in url.split("/", 1)[0]:
        raise RepoError("Only https://, ssh:// and git:// repository URLs are accepted.")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise RepoError("Only https://, ssh:// and git:// repository URLs are accepted.")
    try:
        host, port = (parts.hostname or "").lower(), parts.port or SCHEMES[scheme]
    except ValueError:
        raise RepoError("The URL's port is not a number.") from None
    if not host:
        raise RepoError("The URL names no host.")
    _check_user(parts, scheme)
    if not parts.path.strip("/") or parts.path.startswith("/-") or "/../" in f"{parts.path}/":
        raise RepoError("The URL names no repository path.")
    if parts.fragment:
        raise RepoError("The URL must not have a #fragment.")
    try:
        literal = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    if literal is None and not HOST_NAME.match(host):
        raise RepoError("The URL's host is not a valid host name.")
    addresses = _resolve(host, port)
    if not trusted and not _allowed(host, port):
        for address in addresses:
            ip = ipaddress.ip_address(address)
            if not ip.is_global or ip.is_multicast:
                raise RepoError(
                    f"{host} resolves to a local or private address ({address}): the "
                    "deployment does not allow it (GIT_ALLOWED_HOSTS)."
                )
    netloc = parts.netloc.lower() if scheme != "ssh" else parts.netloc
    return Remote(
        url=urlunsplit((scheme, netloc, parts.path, parts.query, "")),
        scheme=scheme,
        host=host.strip("[]"),
        port=port,
        addresses=addresses,
    )


def _check_user(parts: SplitResult, scheme: str) -> None:
    """No user name or token in the URL, but an ssh URL's user, which must be a plain name:
    ssh takes one that starts with "-" for an option, and git decodes %-escapes in it."""
    if parts.password is not None or (scheme != "ssh" and parts.username is not None):
        raise RepoError(
            "Put no user name or token in the URL: save it as a credential and choose it."
        )
    user = parts.username
    if user is not None and not (SSH_USER.match(user) and SSH_USER.match(unquote(user))):
        raise RepoError(
            "The ssh user name in the URL must be a plain name such as git (letters, digits, "
            "'.', '_' or '-', not first, no %-escapes)."
        )


def _resolve(host: str, port: int) -> tuple[str, ...]:
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise RepoError(f"The host {host} could not be found.") from None
    seen: list[str] = []
    for info in infos:
        address = str(info[4][0]).split("%", 1)[0]
        if address not in seen:
            seen.append(address)
    if not seen:
        raise RepoError(f"The host {host} could not be found.")
    return tuple(seen)


# -- the runner --------------------------------------------------------------------------------
# Given on every command line (``-c`` wins over every config file git reads).
FLAGS = (
    "--no-replace-objects",
    *(
        a
        for o in (
            "protocol.allow=never",
            "protocol.https.allow=always",
            "protocol.ssh.allow=always",
            "protocol.git.allow=always",
            f"core.hooksPath={os.devnull}",
            "core.fsmonitor=false",
            f"core.attributesFile={os.devnull}",
            f"core.excludesFile={os.devnull}",
            "core.askPass=",
            "credential.helper=",
            "http.followRedirects=false",
            "submodule.recurse=false",
            "fetch.recurseSubmodules=false",
            "fetch.unpackLimit=1",  # objects stay in packs: the snapshot store copies them
            "transfer.unpackLimit=1",
            "gc.auto=0",
            "maintenance.auto=false",
            "advice.detachedHead=false",
            "init.defaultBranch=main",
        )
        for a in ("-c", o)
    ),
)


@dataclass
class Secret:
    """What authenticates to the remote: a token (https) or a private key (ssh)."""

    kind: str  # "token" | "ssh_key"
    value: str = field(repr=False)


@dataclass
class Watch:
    """Bounds and reports for one git process: progress is handed to ``on_progress`` (at
    most every ``every`` seconds); ``cancelled`` is asked twice a second."""

    deadline: float
    max_bytes: int = 0
    max_files: int = 0
    on_progress: Callable[[str, int, int], None] | None = None
    cancelled: Callable[[], bool] | None = None
    every: float = 0.25
    # git's stdout handed on as it comes instead of kept (a ``RepoError`` it raises stops git)
    on_stdout: Callable[[bytes], None] | None = None


def _environment(
    home: str, remote: Remote, secret: Secret | None, key_dir: str, host_key: str = ""
) -> dict:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_PROTOCOL_FROM_USER": "0",
        "GIT_ALLOW_PROTOCOL": "https:ssh:git",
        "GIT_SSH_VARIANT": "ssh",
    }
    if settings.GIT_SSL_CAINFO:
        env["GIT_SSL_CAINFO"] = settings.GIT_SSL_CAINFO
    config = list(remote.config())
    ssh = [
        # IdentityFile=none first: ssh looks for the server account's own keys in the home
        # of the system's user list, not $HOME; none of them is ever offered to a host.
        "ssh", "-F", os.devnull, "-o", "IdentityFile=none", "-o", "IdentityAgent=none",
        "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
        # The host key the clone met is pinned for every later call (a push): trust on
        # first use, once per session, not once per call.
        "-o", f"StrictHostKeyChecking={'yes' if host_key else 'accept-new'}",
        "-o", f"UserKnownHostsFile={key_dir}/known_hosts",
        "-o", f"HostKeyAlias={remote.host}", "-o", "ProxyCommand=none",
        "-o", "PermitLocalCommand=no",
    ]  # fmt: skip
    if host_key:
        Path(key_dir, "known_hosts").write_text(host_key)
    if secret is not None and secret.kind == "token":
        pair = base64.b64encode(f"x-access-token:{secret.value}".encode()).decode()
        config.append(("http.extraHeader", f"Authorization: Basic {pair}"))
    elif secret is not None and secret.kind == "ssh_key":
        key = Path(key_dir) / "key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            # A key pasted from Windows (CRLF) does not load; it needs its final newline.
            out.write(secret.value.replace("\r\n", "\n").strip() + "\n")
        ssh += ["-i", str(key)]
    env["GIT_SSH_COMMAND"] = " ".join(ssh)
    env["GIT_CONFIG_COUNT"] = str(len(config))
    for i, (name, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{i}"] = name
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


def scrub(text: str, secret: Secret | None) -> str:
    """``text`` without the secret (or its Basic form), and at most 500 characters."""
    if secret is not None and secret.value:
        for form in (
            secret.value,
            base64.b64encode(f"x-access-token:{secret.value}".encode()).decode(),
        ):
            text = text.replace(form, "***")
    text = re.sub(r"(?i)authorization: *\S+ *\S*", "Authorization: ***", text)
    return text.strip()[-500:]


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str  # scrubbed
    host_key: str = ""  # the ssh host key git met (a known_hosts line), for the next call


@contextlib.contextmanager
def _scratch() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="agentplat-git-") as directory:
        os.chmod(directory, 0o700)
        yield directory


def run(
    args: Sequence[str],
    *,
    remote: Remote,
    secret: Secret | None,
    watch: Watch,
    cwd: Path,
    git_dir: Path | None = None,
    host_key: str = "",
) -> Result:
    """Run ``git <args>`` against ``remote``, bounded by ``watch``; raises ``RepoLimitError``
    or ``RepoCancelled`` (after killing it) when a bound is passed."""
    git = shutil.which("git")
    if git is None:
        raise RepoError("git is not installed on the server.")
    with _scratch() as scratch:
        env = _run_environment(scratch, remote, secret, host_key, git_dir)
        proc = subprocess.Popen(
            [git, *FLAGS, *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        output = _GitOutput(proc, watch)
        _wait(proc, watch, output)
        known = Path(scratch, "known_hosts")
        return Result(
            proc.returncode,
            b"".join(output.out).decode("utf-8", "replace"),
            scrub(b"".join(output.err).decode("utf-8", "replace"), secret),
            known.read_text()[:16384] if known.is_file() else host_key,
        )


def _run_environment(
    scratch: str, remote: Remote, secret: Secret | None, host_key: str, git_dir: Path | None
) -> dict:
    """git's environment for one run, its empty ``HOME`` and its key files in ``scratch``;
    ``GIT_DIR`` when the repository is not the working directory's."""
    home = os.path.join(scratch, "home")
    os.mkdir(home)
    env = _environment(home, remote, secret, scratch, host_key)
    if git_dir is not None:
        env["GIT_DIR"] = str(git_dir)
    return env


class _GitOutput:
    """git's stdout and stderr, each read by a thread of its own as they come: stdout kept up
    to 1 MiB, stderr up to 64 KiB and read line by line for its progress, which is handed to
    ``watch.on_progress`` and checked against the watch's bounds (a bound passed is kept in
    ``failure``, for the waiting thread to raise)."""

    def __init__(self, proc: subprocess.Popen, watch: Watch) -> None:
        self.proc = proc
        self.watch = watch
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self.failure: list[RepoError] = []
        self.last = 0.0
        self.readers = [
            threading.Thread(target=f, daemon=True) for f in (self._read_out, self._read_err)
        ]

    def _read_out(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        for chunk in iter(lambda: stdout.read1(65536), b""):
            if self.watch.on_stdout is not None:
                if not self.failure:
                    try:
                        self.watch.on_stdout(chunk)
                    except RepoError as exc:
                        self.failure.append(exc)
            elif sum(map(len, self.out)) < 1 << 20:
                self.out.append(chunk)

    def _read_err(self) -> None:
        stderr = self.proc.stderr
        assert stderr is not None
        pending = b""
        for chunk in iter(lambda: stderr.read1(65536), b""):
            pending += chunk
            *lines, pending = re.split(rb"[\r\n]", pending)
            for line in lines:
                self._progress(line.decode("utf-8", "replace"))
            if sum(map(len, self.err)) < 1 << 16:
                self.err.append(chunk)

    def _progress(self, line: str) -> None:
        match = PROGRESS.search(line)
        if not match:
            return
        phase, done, total = match["phase"].strip(), int(match["done"]), int(match["total"])
        self.failure.extend(_bounds_passed(match, self.watch))
        now = time.monotonic()
        if self.watch.on_progress and (now - self.last >= self.watch.every or done == total):
            self.last = now
            with contextlib.suppress(Exception):
                self.watch.on_progress(phase, done, total)


def _bounds_passed(progress: re.Match[str], watch: Watch) -> list[RepoError]:
    """The bounds a line of git's progress shows passed: what it received
    (``REPO_MAX_BYTES``), the files it checks out (``REPO_MAX_FILES``)."""
    passed: list[RepoError] = []
    if progress["size"] and watch.max_bytes:
        received = float(progress["size"]) * UNITS[progress["unit"]]
        if received > watch.max_bytes:
            passed.append(
                RepoLimitError(
                    f"The repository is larger than {watch.max_bytes:,} bytes (REPO_MAX_BYTES)."
                )
            )
    updating = progress["phase"].strip().startswith("Updating files")
    if updating and watch.max_files and int(progress["total"]) > watch.max_files:
        passed.append(
            RepoLimitError(
                f"The repository has more than {watch.max_files:,} files (REPO_MAX_FILES)."
            )
        )
    return passed


def _wait(proc: subprocess.Popen, watch: Watch, output: _GitOutput) -> None:
    """Wait for git to end while its output is read; past a bound, or cancelled, its process
    group is killed and the bound raised. Its pipes are closed either way."""
    for reader in output.readers:
        reader.start()
    try:
        while proc.poll() is None:
            if output.failure:
                raise output.failure[0]
            if time.monotonic() > watch.deadline:
                raise RepoLimitError(
                    f"The repository took longer than {settings.REPO_CLONE_TIMEOUT:g} s "
                    "(REPO_CLONE_TIMEOUT)."
                )
            if watch.cancelled and watch.cancelled():
                raise RepoCancelled("Cancelled.")
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(0.5)
        for reader in output.readers:
            reader.join(5)
        if output.failure:
            raise output.failure[0]
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def failure_sentence(result: Result, what: str) -> str:
    """One sentence for a failed git: its last ``fatal:``/``error:`` line, scrubbed."""
    lines = [line.strip() for line in re.split(r"[\r\n]", result.stderr) if line.strip()]
    errors = [line for line in lines if line.startswith(("fatal:", "error:", "remote: error", "!"))]
    detail = errors[-1] if errors else (lines or ["no detail"])[-1]
    # ssh's own reason comes before git's "Could not read from remote repository".
    cause = next((line for line in lines if SSH_CAUSES.search(line)), "")
    if cause and cause != detail:
        detail = f"{cause} ({detail})"
    return f"{what} failed: {detail[:300]}"


SSH_CAUSES = re.compile(
    r"Permission denied|Load key|Host key verification failed|Connection refused"
    r"|Could not resolve hostname|Connection timed out|No route to host"
)
