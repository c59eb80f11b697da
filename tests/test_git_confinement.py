"""docs/semantics.md §11.1 and §2.3: the git the server runs on a worktree runs nothing the worktree
holds. A repository nested in the worktree (its config's fsmonitor, its hooks, its filter and
diff drivers), a ``.gitattributes`` naming drivers and a ``.gitmodules`` are data: a step's
snapshots, the diff view, revert and unrevert and an export leave no trace of having run any
of them, and the nested repository's files are snapshotted as plain files. Every git the
product starts goes through one runner, which always passes the overrides and the
environment that make this so."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.conf import settings as django_settings

from scripts.architecture import PACKAGES
from sessions_app.models import Message, Session
from tests.conftest import new_session, run_turn
from tests.support.planting import planted
from workspace import snapshots

pytestmark = pytest.mark.django_db(transaction=True)

REAL_GIT = shutil.which("git")
PRODUCT = PACKAGES  # the project's packages (scripts/architecture.py)
HOOKS = (
    "pre-commit",
    "post-checkout",
    "post-index-change",
    "post-commit",
    "reference-transaction",
    "pre-auto-gc",
    "post-rewrite",
)


def system_git(cwd: Path, *args: str) -> str:
    """The test's own git, on a repository of its own (none of the runner's overrides)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "SECRET_KEY"}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    args = ("-c", "user.email=a@example.com", "-c", "user.name=a", *args)
    return subprocess.run(
        [REAL_GIT, *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout


def trap(path: Path, marker: Path) -> str:
    """A script at ``path`` that leaves ``marker`` (with who ran it and with what) when run."""
    path.write_text(f'#!/bin/sh\n{{ id; env; echo "$@"; }} > "{marker}"\nexit 0\n')
    path.chmod(0o755)
    return str(path)


def plant(worktree: Path, markers: Path) -> None:
    """A nested repository whose every way of running something leaves a marker file, and
    worktree files that name drivers and submodules."""
    markers.mkdir()
    sub = worktree / "sub"
    sub.mkdir(parents=True)
    (sub / "s.txt").write_text("nested\n")
    system_git(sub, "init", "-q")
    system_git(sub, "add", "s.txt")
    system_git(sub, "commit", "-q", "-m", "x")
    hooks = sub / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook in HOOKS:
        trap(hooks / hook, markers / f"hook-{hook}")
    config = {
        "core.fsmonitor": trap(worktree / "fsmonitor.sh", markers / "fsmonitor"),
        "filter.evil.clean": trap(markers.parent / "clean.sh", markers / "filter-clean"),
        "filter.evil.smudge": trap(markers.parent / "smudge.sh", markers / "filter-smudge"),
        "filter.evil.process": trap(markers.parent / "process.sh", markers / "filter-process"),
        "diff.evil.textconv": trap(markers.parent / "textconv.sh", markers / "textconv"),
        "diff.evil.command": trap(markers.parent / "diffcmd.sh", markers / "diff-command"),
        "core.sshCommand": trap(markers.parent / "ssh.sh", markers / "ssh"),
    }
    for key, value in config.items():
        system_git(sub, "config", key, value)
    (sub / ".gitattributes").write_text("* filter=evil diff=evil\n")
    (worktree / ".gitattributes").write_text("* filter=evil diff=evil\n")
    ext = trap(markers.parent / "ext.sh", markers / "submodule-url")
    (worktree / ".gitmodules").write_text(
        '[submodule "sub"]\n\tpath = sub\n\turl = ext::sh ' + ext + "\n"
        f"\tupdate = !{ext}\n\tignore = none\n"
    )


def ran(markers: Path) -> list[str]:
    return sorted(p.name for p in markers.iterdir())


def test_a_nested_repository_runs_nothing_through_steps_diffs_revert_and_export(api, tmp_path):
    sid = new_session(api)
    run_turn(api, sid, "write a.txt one")
    session = Session.objects.get(id=sid)
    markers = tmp_path / "markers"
    plant(session.worktree, markers)
    planted(session.worktree)

    run_turn(api, sid, "write sub/x.txt hello")  # two snapshots in the worker
    first, second = Message.objects.filter(session_id=sid, role="user").order_by("id")
    diff = api.get(f"/api/sessions/{sid}/diff/")  # a peek, in the web process
    assert {d["file"] for d in diff.json()} == {
        "a.txt",
        ".gitattributes",
        ".gitmodules",
        "fsmonitor.sh",
        "sub/.gitattributes",
        "sub/s.txt",
        "sub/x.txt",
    }, "the nested repository's files are plain files of the snapshot, its .git is not"
    turn = api.get(f"/api/sessions/{sid}/diff/?message_id={second.id}").json()
    assert [d["file"] for d in turn] == ["sub/x.txt"]
    one = api.get(f"/api/sessions/{sid}/diff/?file=sub/s.txt").json()
    assert "+nested" in one["patch"]
    run_turn(api, sid, "write sub/y.txt again")
    revert = api.post(f"/api/sessions/{sid}/revert/", {"message_id": first.id}, format="json")
    assert revert.status_code == 200, revert.json()
    assert not (session.worktree / "sub" / "x.txt").exists()
    assert not (session.worktree / "sub" / "y.txt").exists()
    assert (session.worktree / "sub" / ".git" / "HEAD").is_file(), "never the snapshot's"
    assert api.post(f"/api/sessions/{sid}/unrevert/").status_code == 200
    assert (session.worktree / "sub" / "x.txt").read_text() == "hello"
    assert (session.worktree / "sub" / "y.txt").read_text() == "again"
    exported = api.get(f"/api/sessions/{sid}/export/?format=json")
    assert exported.status_code == 200
    assert "sub/s.txt" in {f["path"] for f in exported.json()["files"]}

    assert ran(markers) == [], "a server process ran something the worktree holds"
    index = system_git(session.worktree, f"--git-dir={session.snapshot_dir}", "ls-files", "-s")
    assert not [line for line in index.splitlines() if line.startswith("160000")]


def test_a_gitlink_left_in_an_index_of_before_is_taken_apart_before_git_reads_it(api, tmp_path):
    sid = new_session(api)
    run_turn(api, sid, "write a.txt one")
    session = Session.objects.get(id=sid)
    markers = tmp_path / "markers"
    plant(session.worktree, markers)
    head = system_git(session.worktree / "sub", "rev-parse", "HEAD").strip()
    # What an index of a session snapshotted before this rule holds: the nested repo's gitlink.
    system_git(
        session.worktree,
        f"--git-dir={session.snapshot_dir}",
        "update-index",
        "--add",
        "--cacheinfo",
        f"160000,{head},sub",
    )
    tree = snapshots.for_session(session).track()
    assert ran(markers) == []
    assert "sub/s.txt" in snapshots.for_session(session)._all_files(tree)


def test_no_child_git_or_shell_can_start_from_the_runner(tmp_path):
    """The backstop: even a gitlink in the index (which ``_add_all`` never leaves) cannot
    make git start a ``git status`` inside the nested repository: git finds no git to run."""
    worktree = tmp_path / "wt"
    markers = tmp_path / "markers"
    plant(worktree, markers)
    snap = snapshots.Snapshots(git_dir=tmp_path / "snap.git", worktree=worktree)
    snap.ensure()
    head = system_git(worktree / "sub", "rev-parse", "HEAD").strip()
    snap.check(["update-index", "--add", "--cacheinfo", f"160000,{head},sub"])
    result = snap._run(["add", "--all", "--", "."])
    assert result.code != 0 and "status" in result.stderr
    assert ran(markers) == []


# -- one runner, always hardened ----------------------------------------------------------------
SPAWNERS = re.compile(
    r"^(subprocess\.(Popen|run|call|check_call|check_output|getoutput|getstatusoutput)"
    r"|asyncio\.create_subprocess_(exec|shell)|os\.(system|popen|exec\w*|spawn\w*|posix_spawn\w*)"
    r"|Popen|create_subprocess_(exec|shell)|pty\.spawn)$"
)


def _product_files() -> list[Path]:
    root = Path(django_settings.BASE_DIR)
    return sorted(p for package in PRODUCT for p in (root / package).rglob("*.py"))


def _spawn_calls(path: Path) -> list[tuple[str, int, str]]:
    """``(function, line, argv source)`` of every call that starts a process in ``path``."""
    source = path.read_text()
    tree = ast.parse(source)
    found = []
    scopes: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            for child in ast.walk(node):
                scopes.setdefault(id(child), node.name)
            for inner in ast.walk(node):
                if inner is not node and isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
                    for child in ast.walk(inner):
                        scopes[id(child)] = f"{node.name}.{inner.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and SPAWNERS.match(ast.unparse(node.func)):
            argv = " ".join(ast.unparse(a) for a in node.args)
            found.append((scopes.get(id(node), "<module>"), node.lineno, argv))
    return found


# The two places a git process starts: the snapshots' runner (local: no network, no exec
# path, no helper) and the remotes' runner (a clone or a push: the one that may reach a
# repository host, with protocols, redirects, helpers and config fenced off: repos.py).
RUNNERS = [("workspace/repos.py", "run"), ("workspace/snapshots.py", "Snapshots._run")]


def test_every_git_the_product_starts_goes_through_one_of_the_two_runners():
    starts = {
        (path.relative_to(django_settings.BASE_DIR).as_posix(), where, line, argv)
        for path in _product_files()
        for where, line, argv in _spawn_calls(path)
    }
    assert starts, "the scan finds the process starts"
    gits = sorted(s for s in starts if re.search(r"\bgit\b", s[3], re.IGNORECASE))
    assert [(s[0], s[1]) for s in gits] == RUNNERS
    for module, _ in RUNNERS:
        started = [s for s in starts if s[0] == module]
        assert len(started) == 1, f"{module} starts processes in one place only"
    # Nothing else names git's binary to start it another way: no ``which("git")``, no argv
    # that begins with it (a session's ``source`` type "git" is a word, not a program).
    for path in _product_files():
        for node in ast.walk(ast.parse(path.read_text())):
            looked_up = (
                isinstance(node, ast.Call)
                and ast.unparse(node.func).endswith("which")
                and any(isinstance(a, ast.Constant) and a.value == "git" for a in node.args)
            )
            argv = (
                isinstance(node, ast.List | ast.Tuple)
                and node.elts
                and isinstance(node.elts[0], ast.Constant)
                and node.elts[0].value == "git"
            )
            if looked_up or argv:
                assert path.name in ("snapshots.py", "repos.py"), f"{path}: {node.lineno}"


@pytest.fixture
def recorded(monkeypatch) -> list[tuple[list[str], dict[str, str]]]:
    """Every process the snapshots module starts: its argv and its environment."""
    calls: list[tuple[list[str], dict[str, str]]] = []

    def popen(args, *rest, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls.append((list(args), dict(kwargs.get("env") or os.environ)))
        return subprocess.Popen(args, *rest, **kwargs)

    module = SimpleNamespace(**{n: getattr(subprocess, n) for n in dir(subprocess)})
    module.Popen = popen
    monkeypatch.setattr(snapshots, "subprocess", module)
    return calls


def test_the_runner_always_passes_the_hardening(api, recorded, tmp_path):
    os.environ["AGENTPLAT_PROBE_SECRET"] = "leak-me"
    try:
        sid = new_session(api)
        run_turn(api, sid, "write a.txt one")
        session = Session.objects.get(id=sid)
        plant(session.worktree, tmp_path / "markers")
        run_turn(api, sid, "write sub/x.txt hello")
        first = Message.objects.filter(session_id=sid, role="user").order_by("id").first()
        api.get(f"/api/sessions/{sid}/diff/")
        api.get(f"/api/sessions/{sid}/diff/?message_id={first.id}&file=a.txt")
        api.post(f"/api/sessions/{sid}/revert/", {"message_id": first.id}, format="json")
        api.post(f"/api/sessions/{sid}/unrevert/")
        api.get(f"/api/sessions/{sid}/export/?format=json")
    finally:
        del os.environ["AGENTPLAT_PROBE_SECRET"]
    assert len(recorded) > 10
    for argv, env in recorded:
        assert os.path.isabs(argv[0]) and os.path.basename(argv[0]) == "git"
        pairs = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-c"}
        assert {
            f"core.hooksPath={os.devnull}",
            "core.fsmonitor=false",
            f"core.attributesFile={os.devnull}",
            "diff.ignoreSubmodules=all",
            "submodule.recurse=false",
            "protocol.allow=never",
            "protocol.file.allow=never",
        } <= pairs, argv
        assert "--no-replace-objects" in argv
        assert env["PATH"] == os.devnull and env["GIT_EXEC_PATH"] == os.devnull
        assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_CONFIG_GLOBAL"] == os.devnull
        assert env["GIT_ATTR_NOSYSTEM"] == "1" and env["GIT_NO_REPLACE_OBJECTS"] == "1"
        assert "GIT_CEILING_DIRECTORIES" in env
        assert "AGENTPLAT_PROBE_SECRET" not in env and "SECRET_KEY" not in env
        assert "DATABASE_URL" not in env
