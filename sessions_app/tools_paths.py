from __future__ import annotations

import os
from pathlib import Path


def resolve_inside(root: Path, relative: str) -> Path:
    """``relative`` under ``root``; ValueError for absolute paths, '..' or symlinks out."""
    relative = (
        (relative or "").strip().strip("/") if not os.path.isabs(relative or "") else relative
    )
    if os.path.isabs(relative):
        raise ValueError("Absolute paths are refused.")
    parts = Path(relative).parts if relative else ()
    if ".." in parts:
        raise ValueError("'..' is refused in paths.")
    base = root.resolve()
    target = base.joinpath(*parts)
    real = Path(os.path.realpath(target))
    if real != base and base not in real.parents:
        raise ValueError("The path leads outside the worktree.")
    return target
