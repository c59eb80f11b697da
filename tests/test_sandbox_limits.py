"""Issue 25 (docs/semantics.md §11.3, §11.7): what a shell command shares with the server and how
much it may take. It runs as nobody, cannot reach the kernel keyring (a seccomp filter answers
EPERM, /proc/keys is masked) nor the calls a container runtime refuses; its processes together, with
/tmp and /dev/shm, are bound by one memory limit; a command that takes the worktree past its
bytes or entries leaves it exactly as it was before. Real bubblewrap, real cgroups."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
from pathlib import Path

import pytest

from runs_app.tools import TOOLS, ToolContext, ToolError
from sessions_app.models import Session
from tests.conftest import new_session, run_turn
from workspace import sandbox, sandbox_cgroups, sandbox_probe, seccomp

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None and not os.environ.get("REQUIRE_BROWSER"),
    reason="bubblewrap is not installed (.ci/run installs it)",
)
MB = 1024 * 1024


@pytest.fixture
def worktree(settings, tmp_path):
    settings.AGENT_ALLOW_SHELL = True
    settings.AGENT_SHELL_SANDBOX = "bwrap"
    reason = sandbox.unavailable_reason()
    if "cannot create a sandbox" in reason:
        pytest.skip(reason)
    assert reason == "", reason
    path = tmp_path / "ws" / "ses_mine"
    path.mkdir(parents=True)
    return path


def shell(worktree: Path, command: str) -> str:
    ctx = ToolContext(worktree=worktree, should_abort=lambda: False)
    return TOOLS["shell"].run(ctx, {"command": command})


def failing(worktree: Path, command: str) -> str:
    with pytest.raises(ToolError) as info:
        shell(worktree, command)
    return str(info.value)


def needs(part: str) -> None:
    lost = getattr(sandbox, "limitations", list)()  # (the same test runs on older code)
    if any(part in sentence for sentence in lost):
        pytest.skip(f"this host has no {part}: {lost}")


SYSCALL = (
    'python3 -c "import ctypes, os, sys; libc = ctypes.CDLL(None, use_errno=True); '
    'r = libc.syscall({nr}, {args}); print(r, os.strerror(ctypes.get_errno()))"'
)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64 system call numbers")
def test_the_kernel_keyring_is_refused_with_eperm(worktree):
    needs("seccomp")
    # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING / SESSION_KEYRING, create)
    for args in ("0, -4, 1", "0, -3, 1"):
        assert shell(worktree, SYSCALL.format(nr=250, args=args)) == "-1 Operation not permitted\n"
    # add_key("user", "x", "secret", 6, KEY_SPEC_USER_KEYRING), request_key("user", "x", 0, 0)
    add = "b'user', b'x', b'secret', 6, -4"
    assert shell(worktree, SYSCALL.format(nr=248, args=add)) == "-1 Operation not permitted\n"
    ask = "b'user', b'x', None, 0"
    assert shell(worktree, SYSCALL.format(nr=249, args=ask)) == "-1 Operation not permitted\n"
    # The host's keys are not listed either.
    out = shell(worktree, "cat /proc/keys /proc/key-users 2>&1; true")
    assert "keyring" not in out and "_uid" not in out, out


def test_the_calls_a_container_runtime_refuses_are_refused(worktree):
    needs("seccomp")
    out = failing(worktree, "unshare --user --map-root-user true")
    assert "Operation not permitted" in out
    out = shell(
        worktree,
        'python3 -c "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); '
        "print(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None), "
        'os.strerror(ctypes.get_errno()))"',
    )
    assert out == "-1 Operation not permitted\n"
    # A personality that switches off ASLR is refused; the query and the default are not.
    out = shell(
        worktree,
        'python3 -c "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); '
        "print(libc.personality(0xffffffff), libc.personality(0), "
        'libc.personality(0x0040000), os.strerror(ctypes.get_errno()))"',
    )
    assert out == "0 0 -1 Operation not permitted\n"
    # Threads (clone3 answers ENOSYS: the C library falls back to clone) and children work.
    assert (
        shell(
            worktree,
            "python3 -c 'import threading; t = threading.Thread(); t.start()'"
            " && (sleep 0 &) && echo ok",
        )
        == "ok\n"
    )


def test_commands_run_as_nobody_and_their_files_stay_the_servers(worktree):
    needs("user namespace")
    assert shell(worktree, "id -u; id -g") == "65534\n65534\n"
    shell(worktree, "mkdir -p d/e && echo hi > d/e/f && chmod 600 d/e/f")
    made = worktree / "d" / "e" / "f"
    assert made.stat().st_uid == os.getuid() and made.read_text() == "hi\n"
    made.write_text("the server still writes it")
    shutil.rmtree(worktree / "d")


def _alive(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def test_memory_is_bounded_for_all_the_processes_of_a_command_together(worktree, settings):
    needs("memory cgroup")
    assert settings.AGENT_SHELL_MEMORY_BYTES == 1024 * MB  # the default
    hold = "python3 -c 'x = bytearray({n} * 1024 * 1024); import time; time.sleep({t})'"
    # One process of 600 MB fits (the bound is not per process)...
    assert shell(worktree, hold.format(n=600, t=0) + " && echo fits") == "fits\n"
    # ...three of them at once do not: all are killed, the command with them.
    marker = f"time.sleep({30 + os.getpid() % 50}.5)"
    many = " ".join([hold.format(n=600, t=marker[11:-1]) + " &"] * 3) + " wait; echo survived"
    out = failing(worktree, many)
    assert "used more than 1,073,741,824 bytes of memory" in out and "survived" not in out
    assert _alive(marker) == []


def test_dev_shm_has_a_size_and_dev_is_read_only(worktree, settings):
    settings.AGENT_SHELL_TMP_BYTES = 8 * MB
    out = failing(worktree, "for i in 1 2 3; do head -c 5000000 /dev/zero > /dev/shm/x$i; done")
    assert "No space left on device" in out
    assert "Read-only file system" in failing(worktree, "echo x > /dev/elsewhere")
    assert shell(worktree, "echo x > /dev/null && echo ok") == "ok\n"


def test_tmpfs_pages_count_against_the_memory_bound(worktree, settings):
    needs("memory cgroup")
    settings.AGENT_SHELL_MEMORY_BYTES = 128 * MB
    settings.AGENT_SHELL_TMP_BYTES = 1024 * MB  # the tmpfs would take it: the cgroup does not
    out = failing(
        worktree,
        "for i in $(seq 20); do head -c 15000000 /dev/zero > /dev/shm/x$i || exit 9; done;"
        " echo wrote all",
    )
    assert "used more than 134,217,728 bytes of memory" in out and "wrote all" not in out


@pytest.mark.parametrize("overlay", ["auto", "off"])
def test_entries_count_against_the_worktree(worktree, settings, overlay):
    settings.AGENT_SHELL_OVERLAY = overlay
    settings.WORKTREE_MAX_ENTRIES = 300
    out = failing(worktree, "mkdir many && cd many && for i in $(seq 400); do mkdir d$i; done")
    assert "grew past its limit" in out and "300 files and directories" in out
    if sandbox.uses_layers(worktree):  # its layer dropped: nothing reached the worktree
        assert list(worktree.rglob("*")) == []
        assert "Nothing it wrote reached the worktree." in out
        return
    assert len(list(worktree.rglob("*"))) > 300  # no snapshots here: nothing put back
    shutil.rmtree(worktree / "many")
    out = failing(worktree, "for i in $(seq 400); do : > empty$i; done")
    assert "grew past its limit" in out


def _state(root: Path) -> dict[str, str]:
    """Every entry beneath ``root``: its kind and content."""
    state = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            state[name] = "link " + os.readlink(path)
        elif path.is_dir():
            state[name] = "dir"
        else:
            state[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


def _last_shell_part(api, sid: str) -> dict:
    messages = api.get(f"/api/sessions/{sid}/messages/").json()["results"]
    parts = [p for m in messages for p in m["parts"] if p["type"] == "tool"]
    assert parts[-1]["tool"] == "shell"
    return parts[-1]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("overlay", ["auto", "off"])
def test_a_command_past_the_quota_leaves_the_worktree_as_it_was(api, settings, overlay):
    settings.AGENT_SHELL_OVERLAY = overlay
    settings.AGENT_ALLOW_SHELL = True
    settings.AGENT_SHELL_SANDBOX = "bwrap"
    if sandbox.unavailable_reason():
        pytest.skip(sandbox.unavailable_reason())
    settings.WORKTREE_MAX_BYTES = 5 * MB
    settings.SNAPSHOT_MAX_FILE_BYTES = 1 * MB  # big.bin (2 MB) is not in any snapshot
    sid = new_session(api)
    run_turn(
        api,
        sid,
        "write a.txt first\n"
        "shell mkdir -p empty/dir src && echo code > src/main.c && ln -s a.txt link"
        " && head -c 2000000 /dev/urandom > big.bin",
    )
    worktree = Session.objects.get(id=sid).worktree
    before = _state(worktree)
    assert {"a.txt", "big.bin", "empty/dir", "src/main.c", "link"} <= set(before)

    # The probe's loop: 19 MB files (under the 20 MB file limit, over the snapshot limit)
    # as fast as the disk takes them, an edit, a deletion, new directories and names.
    flood = (
        "shell echo changed > a.txt; rm src/main.c; mkdir -p new/deep; echo '*' > .gitignore;"
        " chmod 0 new/deep new src;"
        " for i in $(seq 20); do head -c 19000000 /dev/zero > more_$i || exit 1; done"
    )
    run_turn(api, sid, flood)
    part = _last_shell_part(api, sid)
    assert part["state"]["status"] == "error"
    assert _state(worktree) == before
    error = part["state"]["error"]
    assert "grew past its limit (5,242,880 bytes" in error, error
    layered = sandbox.uses_layers(worktree)
    undone = "Nothing it wrote reached" if layered else "restored to what it was before"
    assert undone in error, error

    # Many empty entries count too, and are undone the same way.
    settings.WORKTREE_MAX_ENTRIES = 200
    run_turn(api, sid, "shell mkdir flat && cd flat && for i in $(seq 300); do : > f$i; done")
    error = _last_shell_part(api, sid)["state"]["error"]
    assert "200 files and directories" in error and undone in error, error
    assert _state(worktree) == before

    # Under the limits, nothing is undone.
    run_turn(api, sid, "shell echo fine > b.txt")
    assert (worktree / "b.txt").read_text() == "fine\n"


def test_the_sandbox_says_what_this_host_lacks(worktree, monkeypatch):
    assert isinstance(sandbox.limitations(), list)
    monkeypatch.setattr(seccomp, "program", _no_seccomp)
    sandbox_probe.probe.cache_clear()
    try:
        assert sandbox.unavailable_reason() == ""
        lost = sandbox.limitations()
        assert any("No seccomp filter" in s and "kernel keyring" in s for s in lost), lost
        assert shell(worktree, "echo still runs") == "still runs\n"
    finally:
        sandbox_probe.probe.cache_clear()


def _no_seccomp() -> bytes:
    raise seccomp.Unavailable("libseccomp is not installed (test)")


def test_the_cgroups_are_removed_after_each_command(worktree, monkeypatch):
    # This command's own cgroups, by their paths: other test processes run commands beside
    # it in the same roots (comparing the roots' listings raced them).
    made: list[Path] = []
    original = sandbox.Cgroup.__init__

    def recorded(self) -> None:  # noqa: ANN001
        original(self)
        made.extend(self.paths)

    monkeypatch.setattr(sandbox.Cgroup, "__init__", recorded)
    asyncio.run(sandbox.run(worktree, "true", on_output=_nothing, should_stop=lambda: False))
    assert len(made) == len(set(sandbox_cgroups.cgroup_roots().values()))
    assert [path for path in made if path.exists()] == []


async def _nothing(text: str) -> None:
    return None
