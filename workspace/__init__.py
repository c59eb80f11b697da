"""Everything that touches a worktree, whose content is hostile (docs/semantics.md §11,
the trust boundary): snapshots (the one git runner for the local stores), ``repos`` (the one git
runner for remotes), ``worktree_files`` (the one path confinement), archives (``unpack``) and
the shell's sandbox. It knows no session or run: callers hand it paths and ids."""
