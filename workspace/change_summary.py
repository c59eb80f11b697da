"""A change in a few numbers: the totals of a diff's per-file records
(``Snapshots.diff_stat``), what a session stores as its ``summary``."""

from __future__ import annotations


def summary_of(diff: list[dict]) -> dict[str, int]:
    """``{additions, deletions, files}`` of ``diff`` (the records of ``diff_stat``)."""
    return {
        "additions": sum(d["additions"] for d in diff),
        "deletions": sum(d["deletions"] for d in diff),
        "files": len(diff),
    }
