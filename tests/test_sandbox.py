"""Issue 15: the shell's sandbox (workspace/sandbox.py), attacked as a hostile user's agent
would: every escape attempt fails and leaves the server working; a stop kills the whole
tree at once; the output arrives while the command runs. Real bubblewrap, real processes."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path

import pytest

from runs_app.tools import TOOLS, ToolContext, ToolError, ToolInterrupted, available_tools
from tests.conftest import wait_until
from workspace import sandbox, worktree_usage

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None and not os.environ.get("REQUIRE_BROWSER"),
    reason="bubblewrap is not installed (.ci/run installs it)",
)


@pytest.fixture
def shell_on(settings, tmp_path):
    settings.AGENT_ALLOW_SHELL = True
    settings.AGENT_SHELL_SANDBOX = "bwrap"
    settings.WORKSPACE_ROOT = tmp_path / "ws"
    assert sandbox.unavailable_reason() == "", sandbox.unavailable_reason()
    return settings


@pytest.fixture
def worktree(shell_on):
    root = Path(shell_on.WORKSPACE_ROOT)
    mine, other = root / "ses_mine", root / "ses_other"
    mine.mkdir(parents=True)
    other.mkdir(parents=True)
    (other / "secret.txt").write_text("the other user's secret")
    return mine


def shell(worktree: Path, command: str, **ctx_args) -> str:  # noqa: ANN003
    ctx = ToolContext(worktree=worktree, should_abort=lambda: False, **ctx_args)
    return TOOLS["shell"].run(ctx, {"command": command})


def failing(worktree: Path, command: str) -> str:
    with pytest.raises(ToolError) as info:
        shell(worktree, command)
    return str(info.value)


def test_the_worktree_is_the_writable_current_directory(worktree):
    assert shell(worktree, "pwd; echo hi > a.txt; cat a.txt") == "/workspace\nhi\n"
    assert (worktree / "a.txt").read_text() == "hi\n"


def test_another_sessions_worktree_cannot_be_read(worktree):
    other = worktree.parent / "ses_other" / "secret.txt"
    out = failing(worktree, f"cat {other}")
    assert "No such file" in out and "secret" not in out.split(":", 1)[-1].split("\n", 1)[-1]
    out = failing(worktree, "cat ../ses_other/secret.txt")
    assert "No such file" in out
    out = failing(worktree, "ls ..; cat /*/ses_other/secret.txt /*/*/ses_other/secret.txt")
    assert "the other user's secret" not in out


def test_no_server_environment_settings_or_code(worktree, settings):
    os.environ["AGENTPLAT_TEST_SECRET"] = "hunter2"
    try:
        env = shell(worktree, "env")
    finally:
        del os.environ["AGENTPLAT_TEST_SECRET"]
    names = {line.split("=", 1)[0] for line in env.splitlines()}
    assert names <= {"PATH", "HOME", "LANG", "TMPDIR", "PWD", "SHLVL", "_", "OLDPWD"}, names
    assert "hunter2" not in env and "DATABASE_URL" not in env and "SECRET_KEY" not in env
    settings_file = Path(__file__).resolve().parent.parent / "config" / "settings.py"
    assert "No such file" in failing(worktree, f"cat {settings_file}")
    # Nothing of the host's processes: a PID namespace of its own.
    assert "hunter2" not in shell(
        worktree, "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; true"
    )
    assert "No such file" in failing(worktree, "cat /etc/postgresql/*/main/pg_hba.conf")
    assert ".snapshots" not in shell(worktree, "ls -a / /workspace")


@pytest.mark.parametrize("port", [5432, 6379])
def test_no_network_not_even_the_servers_on_loopback(worktree, port):
    out = failing(
        worktree,
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\"",
    )
    assert "Network is unreachable" in out or "Connection refused" in out, out


def test_a_fork_bomb_is_contained_and_the_server_works_on(worktree, settings):
    settings.AGENT_SHELL_TIMEOUT = 3
    started = time.monotonic()
    out = failing(worktree, "bomb() { bomb | bomb & }; bomb; sleep 10")
    assert time.monotonic() - started < 8
    assert "timed out" in out or "Exit status" in out
    settings.AGENT_SHELL_TIMEOUT = 120
    assert shell(worktree, "echo still here") == "still here\n"


def test_the_disk_cannot_be_filled(worktree, settings):
    settings.WORKTREE_MAX_FILE_BYTES = 2 * 1024 * 1024
    settings.WORKTREE_MAX_BYTES = 6 * 1024 * 1024
    out = failing(worktree, "head -c 50000000 /dev/zero > big")
    assert "File size limit exceeded" in out or "Exit status" in out
    assert (worktree / "big").stat().st_size <= 2 * 1024 * 1024
    (worktree / "big").unlink()
    out = failing(
        worktree,
        "i=0; while true; do i=$((i+1)); head -c 1000000 /dev/zero > f$i; sleep 0.05; done",
    )
    assert "grew past" in out
    assert worktree_usage.worktree_bytes(worktree) < 12 * 1024 * 1024
    out = failing(worktree, "head -c 500000000 /dev/zero > /tmp/big")
    assert "No space left" in out or "File size limit" in out


def test_memory_is_bounded(worktree, settings):
    settings.AGENT_SHELL_MEMORY_BYTES = 256 * 1024 * 1024
    out = failing(worktree, "python3 -c 'x = bytearray(1024 ** 3)'")
    assert "MemoryError" in out


def test_a_symlink_to_root_leads_into_the_sandbox_only(worktree):
    shell(worktree, "ln -s / root")
    listing = shell(worktree, "ls root/")
    assert "workspace" in listing and "work\n" not in listing and "home" not in listing
    # The platform's own file tools refuse to follow it out of the worktree.
    ctx = ToolContext(worktree=worktree, should_abort=lambda: False)
    with pytest.raises(ToolError, match="escapes|do not follow links"):
        TOOLS["read"].run(ctx, {"path": "root/etc/alternatives/awk"})


def test_no_privileges_inside(worktree):
    out = shell(worktree, "grep Cap /proc/self/status")
    assert "CapEff:\t0000000000000000" in out
    assert "Read-only" in failing(worktree, "touch /usr/bin/x")


def _alive(marker: str) -> list[int]:
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                pids.append(int(pid))
        except OSError:
            continue
    return pids


def test_a_stop_kills_the_whole_tree_at_once_and_keeps_the_output(worktree):
    marker = f"sleep {30 + os.getpid() % 50}.5"
    stop_at = time.monotonic() + 1.0
    outputs: list[str] = []

    async def output(text: str) -> None:
        outputs.append(text)

    ctx = ToolContext(
        worktree=worktree, should_abort=lambda: time.monotonic() >= stop_at, output=output
    )
    # A child in the background, one that left the process group, and the foreground one.
    command = f"echo started; (setsid {marker} &); {marker} & {marker}"
    with pytest.raises(ToolInterrupted) as info:
        asyncio.run(TOOLS["shell"].arun(ctx, {"command": command}))
    stopped = time.monotonic()
    assert stopped - stop_at < 0.3, f"took {stopped - stop_at:.2f}s to stop"
    assert info.value.output == "started\n" and outputs == ["started\n"]
    wait_until(lambda: _alive(marker) == [], 1.0, "no process of the command left after the stop")


def test_output_arrives_while_the_command_runs(worktree):
    seen: list[tuple[float, str]] = []

    async def output(text: str) -> None:
        seen.append((time.monotonic(), text))

    ctx = ToolContext(worktree=worktree, should_abort=lambda: False, output=output)
    started = time.monotonic()
    result = asyncio.run(
        TOOLS["shell"].arun(ctx, {"command": "for i in 1 2 3; do echo line$i; sleep 0.4; done"})
    )
    ended = time.monotonic()
    assert result == "line1\nline2\nline3\n"
    assert "".join(t for _, t in seen) == result
    assert len(seen) >= 3
    assert seen[0][0] - started < 0.5 and ended - seen[0][0] > 0.7, "line 1 came before the end"


def test_output_is_capped(worktree, settings):
    settings.AGENT_SHELL_OUTPUT_MAX = 1000
    out = shell(worktree, "yes | head -c 100000")
    assert out.startswith("y\ny\n") and "[output cut at 1,000 characters]" in out
    assert len(out) < 1100


def test_without_bubblewrap_the_shell_is_disabled_with_a_reason(worktree, monkeypatch):
    real_which = shutil.which
    monkeypatch.setattr(sandbox.shutil, "which", lambda n: None if n == "bwrap" else real_which(n))
    reason = sandbox.unavailable_reason()
    assert "bubblewrap" in reason and "not installed" in reason
    assert "shell" not in {t.name for t in available_tools()}
    with pytest.raises(ToolError, match="bubblewrap"):
        shell(worktree, "echo never")


def test_off_runs_unconfined_in_the_worktree_with_the_limits(worktree, settings):
    settings.AGENT_SHELL_SANDBOX = "off"
    assert sandbox.unavailable_reason() == ""
    assert shell(worktree, "pwd; echo $HOME") == f"{worktree}\n{worktree}\n"
    settings.WORKTREE_MAX_FILE_BYTES = 1000
    assert "File size limit" in failing(worktree, "head -c 5000 /dev/zero > big")


def test_a_git_calls_credential_files_are_not_there(worktree):
    """A deploy key lives, while a clone or push runs, in a 0600 file of a temporary
    directory of the server's (``workspace.repos``): the sandbox's /tmp is its own."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="agentplat-git-") as scratch:
        (Path(scratch) / "key").write_text("-----BEGIN OPENSSH PRIVATE KEY----- secret")
        out = shell(worktree, f"ls -a /tmp; cat {scratch}/key /tmp/agentplat-git-*/key 2>&1; true")
    assert "secret" not in out and "agentplat-git-" not in out.split("cat", 1)[0]
