"""What the snapshots' git raises (``snapshots`` names them too, for its callers)."""

from __future__ import annotations


class SnapshotError(RuntimeError):
    pass


class MissingObjectError(SnapshotError):
    """Git was asked for an object the store does not hold (a lost object, or an id that
    never was one): the caller answers "not found"."""


__all__ = ["MissingObjectError", "SnapshotError"]
