"""Path names that git refuses to record (``verify_path`` in git's read-cache.c).

Worktree snapshots are git trees, so a file git will not index can never be snapshotted; and
some of these names (``.GIT/config`` on a case-insensitive disk, ``GIT~1`` as the 8.3 name
of ``.git`` on NTFS, ``.git.`` which Windows trims to ``.git``) are how attacks on git reach
a repository's own directory. Tools refuse every such name, with NTFS and HFS+ protection
both on (git turns on only NTFS protection on Linux; we are stricter, never looser):

* a component that is ``.git`` in any case (git: ``verify_dotfile``);
* NTFS: ``.git`` or ``git~1`` (any case) followed only by dots and spaces, or by ``:``
  (an alternate data stream, ``.git::$INDEX_ALLOCATION``); a backslash separates
  components there (``is_ntfs_dotgit``);
* HFS+: ``.git`` (any case) once the code points HFS+ ignores are dropped
  (``is_hfs_dotgit``: U+200C–U+200F, U+202A–U+202E, U+206A–U+206F, U+FEFF);
* empty, ``.`` and ``..`` components.
"""

from __future__ import annotations

import re

_NTFS_DOTGIT = re.compile(r"(?:\.git|git~1)[. ]*(?::.*)?", re.IGNORECASE | re.DOTALL)
_HFS_IGNORED = dict.fromkeys(
    [*range(0x200C, 0x2010), *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF]
)


def refused_component(name: str) -> bool:
    """True when git refuses ``name`` as one component of a path (``/`` already split)."""
    if name in ("", ".", ".."):
        return True
    for piece in name.split("\\"):  # a separator for NTFS
        if piece.lower() == ".git" or _NTFS_DOTGIT.fullmatch(piece):
            return True
        if piece.translate(_HFS_IGNORED).lower() == ".git":
            return True
    return False


def git_refuses(path: str) -> bool:
    """True when git would refuse to index ``path`` (relative, ``/``-separated)."""
    return any(refused_component(part) for part in path.split("/"))
