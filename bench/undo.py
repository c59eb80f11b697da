"""A shell command past the worktree's byte limit, undone (issue 43), both ways in one run.

A worktree of 50,000 files (``--quick``: 5,000) of 1 KB in 50 × 50 directories, snapshotted;
the byte limit set 1 MB above what it holds; then, through the shell tool as a run calls it
(``ToolContext`` with the session's snapshots), ``head -c 2000000 /dev/zero > big``: over the
limit, refused, the worktree left as it was. Timed:

* **over a layer** (the overlay on): the end of the command to the worktree as before — the
  layer measured (``Layer.usage``) and dropped (``sandbox._merge``);
* **in place** (``AGENT_SHELL_OVERLAY=off``, what every host did before): the undo point
  taken before the command (``Undo.record``: a snapshot and a walk), the walk after it that
  finds it over (``worktree_usage.usage``) and the undo (``Undo.apply``: a walk, a restore).

Each the median of N, interleaved; the whole tool call's time beside. Target: undone in
≤ 50 ms at 50,000 files.
"""

from __future__ import annotations

import functools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from .stats import ratio


def _generate(root: Path, files: int) -> None:
    per = max(1, files // 2500)
    for i in range(50):
        for j in range(50):
            d = root / f"d{i:02d}" / f"e{j:02d}"
            d.mkdir(parents=True)
            for k in range(per):
                (d / f"f{k}.txt").write_bytes(b"x" * 1000)


def _timed(owner: Any, name: str, spent: list[float]) -> Any:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent.append((time.perf_counter() - start) * 1000)

    setattr(owner, name, wrapper)
    return original


def run(*, quick: bool) -> dict[str, Any]:
    from django.conf import settings

    files, repeat = (5_000, 5) if quick else (50_000, 9)
    saved = {
        k: getattr(settings, k)
        for k in ("AGENT_ALLOW_SHELL", "AGENT_SHELL_SANDBOX", "AGENT_SHELL_OVERLAY")
    }
    try:
        return _run(files, repeat)
    finally:
        for name, value in saved.items():  # the benchmarks after this one see the settings
            setattr(settings, name, value)


def _run(files: int, repeat: int) -> dict[str, Any]:
    from django.conf import settings

    from runs_app.tools import TOOLS, ToolContext, ToolError
    from workspace import kept_usage, sandbox, worktree_undo, worktree_usage
    from workspace.snapshots import Snapshots

    settings.AGENT_ALLOW_SHELL = True
    settings.AGENT_SHELL_SANDBOX = "bwrap"
    reason = sandbox.unavailable_reason()
    if reason:
        return {"skipped": reason}
    out: dict[str, Any] = {"files": files}
    with tempfile.TemporaryDirectory(prefix="bench-undo-") as tmp:
        worktree = Path(tmp) / "ses_undo"
        _generate(worktree, files)
        snap = Snapshots(git_dir=Path(tmp) / ".snapshots" / "ses_undo.git", worktree=worktree)
        snap.track()
        before = worktree_usage.worktree_usage(worktree)
        limit = before[0] + 1_000_000
        if not sandbox.uses_layers(worktree):
            out["no_overlay"] = sandbox.overlay_reason(worktree.parent)
        ctx = ToolContext(
            worktree=worktree, should_abort=lambda: False, tree_limit=limit, snapshots=snap
        )
        spent: dict[str, list[float]] = {"auto": [], "off": []}
        total: dict[str, list[float]] = {"auto": [], "off": []}
        parts: list[float] = []
        saved = [
            (sandbox, "_merge", _timed(sandbox, "_merge", parts)),
            (worktree_undo.Undo, "record", _timed(worktree_undo.Undo, "record", parts)),
            (worktree_undo.Undo, "apply", _timed(worktree_undo.Undo, "apply", parts)),
            (sandbox, "usage", _timed(sandbox, "usage", parts)),
        ]
        try:
            for _ in range(repeat):
                for way in ("auto", "off"):
                    settings.AGENT_SHELL_OVERLAY = way
                    kept_usage.known(worktree)
                    parts.clear()
                    start = time.perf_counter()
                    try:
                        TOOLS["shell"].run(ctx, {"command": "head -c 2000000 /dev/zero > big"})
                        raise AssertionError("the command past the limit was not refused")
                    except ToolError:
                        pass
                    total[way].append((time.perf_counter() - start) * 1000)
                    spent[way].append(sum(parts))
                    assert worktree_usage.worktree_usage(worktree) == before, "not undone"
        finally:
            for owner, name, original in saved:
                setattr(owner, name, original)
    for way, label in (("auto", "layer"), ("off", "in_place")):
        out[f"{label}_undo_ms"] = statistics.median(spent[way])
        out[f"{label}_call_ms"] = statistics.median(total[way])
    return out


def report(r: dict[str, Any]) -> str:
    from .__main__ import _f, _table

    if "skipped" in r:
        return f"Undo past the byte limit: skipped ({r['skipped']})"
    layer, place = r["layer_undo_ms"], r["in_place_undo_ms"]
    note = (
        f"no overlay here ({r['no_overlay']}): both rows are in place" if "no_overlay" in r else ""
    )
    verdict = "met" if layer <= 50 else "NOT MET"
    return _table(
        f"A command past the byte limit, undone, at {r['files']:,} files (median ms)",
        ["", "undo ms", "whole tool call ms", "target", ""],
        [
            ["over a layer (dropped)", _f(layer), _f(r["layer_call_ms"]), "<= 50", verdict],
            ["in place (undo point, walk, restore)", _f(place), _f(r["in_place_call_ms"]), "", ""],
            ["layer / in place", f"{_f(ratio(layer, place), 3)}x", "", "", ""],
        ],
        note,
    )
