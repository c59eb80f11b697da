"""Tools the agent may call. All of them act inside the session worktree only."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from workspace import kept_usage, sandbox, worktree_files, worktree_undo
from workspace.git_names import git_refuses


class ToolError(Exception):
    """A tool failed; the message becomes the tool part's error."""


class ToolInterrupted(ToolError):
    """A tool was stopped part-way (cancel, abort, interrupt, a lost lease): ``output`` is
    what it had produced."""

    def __init__(self, output: str) -> None:
        super().__init__("Tool execution was interrupted.")
        self.output = output


async def _no_output(text: str) -> None:
    return None


@dataclass
class ToolContext:
    worktree: Path
    should_abort: Callable[[], bool]
    # Where a tool that produces output as it runs (``shell``) hands it, piece by piece.
    output: Callable[[str], Awaitable[None]] = _no_output
    # The worktree's size bound, from the owner's quota (``worktree_bytes``; 0: unlimited);
    # None: the deployment's ``WORKTREE_MAX_BYTES``.
    tree_limit: int | None = None
    # The session's snapshots (``workspace.snapshots.Snapshots``), given by the loop, which
    # holds the session's lock: ``shell`` snapshots the worktree before each command and puts
    # it back when the command goes over the worktree's limits. None: not put back.
    snapshots: worktree_undo.SnapshotsLike | None = None
    # Whether the run still holds its lease: a shell command's layer is merged only then.
    holds_lease: Callable[[], bool] = lambda: True

    @property
    def worktree_limit(self) -> int:
        return settings.WORKTREE_MAX_BYTES if self.tree_limit is None else self.tree_limit


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[[ToolContext, dict[str, Any]], str]
    side_effects: bool = True
    blocks_on_error: bool = False
    # A tool that only waits (``wait``) also has a coroutine: on the run host it waits on the
    # loop instead of holding a thread.
    afn: Callable[[ToolContext, dict[str, Any]], Awaitable[str]] | None = None

    def spec(self) -> dict[str, Any]:
        """The OpenAI function-tool description."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        if not isinstance(args, dict):
            raise ToolError("Tool arguments must be a JSON object.")
        return self.fn(ctx, args)

    async def arun(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        if not isinstance(args, dict):
            raise ToolError("Tool arguments must be a JSON object.")
        assert self.afn is not None
        return await self.afn(ctx, args)


def resolve(worktree: Path, relative: Any, *, allow_root: bool = False) -> tuple[str, ...]:
    """The components of ``relative`` in ``worktree``, checked by name: ToolError for
    absolute paths, ``~``, ``..``, ``.git``, names git refuses and over-long names. What is on
    disk is checked where it is opened (``worktree_files``: by descriptor, one component at a
    time, never through a link)."""
    if not isinstance(relative, str) or (not relative.strip() and not allow_root):
        raise ToolError("A path is required.")
    relative = relative.strip() or "."
    if "\0" in relative:
        raise ToolError("Invalid path.")
    if os.path.isabs(relative) or relative.startswith("~"):
        raise ToolError(f"Path escapes the worktree: {relative} (absolute paths are refused).")
    if ".." in relative.split("/"):
        raise ToolError(f"Path escapes the worktree: {relative} ('..' is refused).")
    try:
        # Over-long names would reach the filesystem as ENAMETOOLONG, an OSError, not a
        # tool error the model can read and correct.
        parts = worktree_files.parts_of(worktree, relative)
    except worktree_files.PathRefused as exc:
        raise ToolError(f"Invalid path: {exc}") from exc
    if any(part == ".git" for part in parts):
        raise ToolError(f"Path {relative} is inside .git, which tools do not touch.")
    if parts and git_refuses("/".join(parts)):
        # Snapshots are git trees: a name git refuses would never be recorded, and names
        # such as .GIT or git~1 are how attacks on git reach its own directory.
        raise ToolError(f"Path {relative} is a name git refuses (a form of .git); pick another.")
    if not parts and not allow_root:
        raise ToolError("A file path is required.")
    return parts


@contextmanager
def _on_disk(relative: Any, doing: str) -> Iterator[None]:
    """What ``worktree_files`` refuses, and what the kernel answers, as tool errors the model
    reads and can correct."""
    try:
        yield
    except worktree_files.PathRefused as exc:
        if exc.reason == "link":
            raise ToolError(
                f"Path {relative} goes through a symlink; file tools do not follow links."
            ) from exc
        if exc.reason == "special":
            raise ToolError(f"{relative} is a FIFO, socket or device, not a file.") from exc
        raise ToolError(f"Invalid path: {exc}") from exc
    except OSError as exc:
        raise ToolError(f"Cannot {doing} {relative}: {exc.strerror}.") from exc


def _text_arg(args: dict[str, Any], name: str) -> str:
    value = args.get(name, "")
    if not isinstance(value, str):
        raise ToolError(f"'{name}' must be a string.")
    return value


READ_MAX = 1_000_000


def _read(ctx: ToolContext, args: dict[str, Any]) -> str:
    parts = resolve(ctx.worktree, args.get("path"))
    with _on_disk(args.get("path"), "read"):
        try:
            _size, data = worktree_files.read_file(ctx.worktree, parts, limit=READ_MAX)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise ToolError(f"No such file: {args.get('path')}") from exc
    if data is None:
        raise ToolError("File is larger than 1 MB.")
    return data.decode("utf-8", errors="replace")


def current_text(worktree: Path, relative: Any, *, limit: int) -> tuple[int, str]:
    """What a write, append or delete of ``relative`` would replace (the approval card's
    diff): the file's size and its text, "" when it holds more than ``limit`` bytes or is not
    there. ToolError as the tools refuse."""
    parts = resolve(worktree, relative)
    with _on_disk(relative, "read"):
        try:
            size, data = worktree_files.read_file(worktree, parts, limit=limit)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return 0, ""
    return size, data.decode("utf-8", errors="replace") if data is not None else ""


def _list(ctx: ToolContext, args: dict[str, Any]) -> str:
    parts = resolve(ctx.worktree, args.get("path", "") or "", allow_root=True)
    with _on_disk(args.get("path") or ".", "list"):
        try:
            entries = worktree_files.list_dir(ctx.worktree, parts)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise ToolError(f"No such directory: {args.get('path') or '.'}") from exc
    return "\n".join(name + ("/" if is_dir else "") for name, is_dir in entries)


def _check_room(ctx: ToolContext, name: str, old: int, size: int) -> None:
    """Refuse a write that would make the file ``name`` (``old`` bytes now) ``size`` bytes,
    or the worktree larger than the deployment allows (``WORKTREE_MAX_FILE_BYTES``, the
    owner's ``worktree_bytes``): a tool error the model reads, before anything is written."""
    file_limit, tree_limit = settings.WORKTREE_MAX_FILE_BYTES, ctx.worktree_limit
    if file_limit and size > file_limit:
        raise ToolError(
            f"{name} would be {size:,} bytes; a file may hold at most {file_limit:,} bytes."
        )
    if tree_limit:
        total = kept_usage.known(ctx.worktree)[0] - old + size
        if total > tree_limit:
            raise ToolError(
                f"The worktree would hold {total:,} bytes; it may hold at most {tree_limit:,}."
                " Delete files first."
            )


def _write_file(ctx: ToolContext, args: dict[str, Any], content: str, *, append: bool) -> int:
    """Write (or append) ``content`` to the file ``args["path"]``, its parent directories
    made if need be, never through a link and never in place (``worktree_files.replace_file``):
    the bytes written."""
    relative = args.get("path")
    parts = resolve(ctx.worktree, relative)
    data = content.encode()
    with _on_disk(relative, "write"):
        try:
            old = worktree_files.size_of(ctx.worktree, parts)
        except IsADirectoryError as exc:
            raise ToolError(f"{relative} is a directory.") from exc
        _check_room(ctx, parts[-1], old, old + len(data) if append else len(data))
        try:
            # A new file renamed over the old (a fork may share the old one by hard link).
            worktree_files.replace_file(ctx.worktree, parts, data, append=append)
        except IsADirectoryError as exc:
            raise ToolError(f"{relative} is a directory.") from exc
    return len(data)


def _write(ctx: ToolContext, args: dict[str, Any]) -> str:
    written = _write_file(ctx, args, _text_arg(args, "content"), append=False)
    return f"Wrote {written} bytes to {args.get('path')}."


def _append(ctx: ToolContext, args: dict[str, Any]) -> str:
    written = _write_file(ctx, args, _text_arg(args, "content") + "\n", append=True)
    return f"Appended {written} bytes to {args.get('path')}."


def _delete(ctx: ToolContext, args: dict[str, Any]) -> str:
    parts = resolve(ctx.worktree, args.get("path"))
    with _on_disk(args.get("path"), "delete"):
        try:
            worktree_files.delete_file(ctx.worktree, parts)
        except IsADirectoryError as exc:
            raise ToolError(f"{args.get('path')} is a directory.") from exc
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise ToolError(f"No such file: {args.get('path')}") from exc
    return f"Deleted {args.get('path')}."


def _wait_seconds(args: dict[str, Any]) -> float:
    try:
        seconds = float(args.get("seconds", 1))
    except (TypeError, ValueError) as exc:
        raise ToolError("'seconds' must be a number.") from exc
    return max(0.0, min(seconds, 3600.0))


def _wait(ctx: ToolContext, args: dict[str, Any]) -> str:
    seconds = _wait_seconds(args)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if ctx.should_abort():
            raise ToolError("Aborted while waiting.")
        time.sleep(min(0.05, max(0.0, end - time.monotonic())))
    return f"Waited {seconds:g} seconds."


async def _await(ctx: ToolContext, args: dict[str, Any]) -> str:
    seconds = _wait_seconds(args)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if ctx.should_abort():
            raise ToolError("Aborted while waiting.")
        await asyncio.sleep(min(0.05, max(0.0, end - time.monotonic())))
    return f"Waited {seconds:g} seconds."


async def _ashell(ctx: ToolContext, args: dict[str, Any]) -> str:
    reason = sandbox.unavailable_reason()
    if reason:
        raise ToolError(reason)
    command = _text_arg(args, "command")
    if not command.strip():
        raise ToolError("A command is required.")
    if len(command) > 100_000:
        raise ToolError("The command is longer than 100,000 characters.")
    undo = None
    if ctx.snapshots is not None and not await asyncio.to_thread(sandbox.uses_layers, ctx.worktree):
        # No layer to drop: the worktree as it is now, to put back past a limit.
        undo = await asyncio.to_thread(worktree_undo.Undo.record, ctx.worktree, ctx.snapshots)
    outcome = await sandbox.run(
        ctx.worktree,
        command,
        on_output=ctx.output,
        should_stop=ctx.should_abort,
        tree_limit=ctx.worktree_limit,
        may_write=ctx.holds_lease,
    )
    return await _shell_answer(ctx, outcome, undo)


async def _shell_answer(
    ctx: ToolContext, outcome: sandbox.Outcome, undo: worktree_undo.Undo | None
) -> str:
    """The model's answer to a command that ended: its output and notes, or the ToolError
    (a killed command's worktree put back first, where it went past its limits)."""
    out = outcome.output
    if outcome.truncated:
        out += f"\n[output cut at {settings.AGENT_SHELL_OUTPUT_MAX:,} characters]"
    if outcome.removed:
        shown = ", ".join(outcome.removed[:5]) + (", …" if len(outcome.removed) > 5 else "")
        out += (
            f"\n[removed {len(outcome.removed)} special file(s) from the worktree, which holds "
            f"only files, folders and links: {shown}]"
        )
    if outcome.stopped == "stopped":
        raise ToolInterrupted(out)
    kept = " Nothing it wrote was kept." if outcome.layered else ""
    if outcome.stopped == "timeout":
        raise ToolError(
            f"Command timed out after {settings.AGENT_SHELL_TIMEOUT:g} seconds and was killed."
            f"{kept}\n" + out
        )
    if outcome.stopped == "memory":
        raise ToolError(
            f"Command killed: its processes together used more than "
            f"{settings.AGENT_SHELL_MEMORY_BYTES:,} bytes of memory (/tmp and /dev/shm "
            f"included).{kept}\n" + out
        )
    if outcome.stopped == "worktree-size":
        done = "What it wrote is still there."
        if outcome.layered:
            done = "Nothing it wrote reached the worktree."
        elif undo is not None:
            try:
                left = await asyncio.to_thread(undo.apply)
            except (RuntimeError, OSError) as exc:  # SnapshotError is a RuntimeError
                done = f"Putting the worktree back failed: {exc}"
            else:
                done = "The worktree was restored to what it was before the command."
                if left:
                    done = done[:-1] + (
                        f", but for {len(left)} path(s) that snapshots do not hold:"
                        f" {', '.join(left[:5])}."
                    )
        limits = [f"{ctx.worktree_limit:,} bytes"] if ctx.worktree_limit else []
        if settings.WORKTREE_MAX_ENTRIES:
            limits.append(f"{settings.WORKTREE_MAX_ENTRIES:,} files and directories")
        raise ToolError(
            f"Command killed: the worktree grew past its limit ({' or '.join(limits)})."
            f" {done}\n" + out
        )
    if outcome.exit_code != 0:
        raise ToolError(f"Exit status {outcome.exit_code}.\n{out}")
    return out


def _shell(ctx: ToolContext, args: dict[str, Any]) -> str:
    """For callers outside the run host (a thread of their own)."""
    return asyncio.run(_ashell(ctx, args))


def _obj(**props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props)}


_PATH = {"type": "string", "description": "Path relative to the worktree."}
_CONTENT = {"type": "string"}

TOOLS: dict[str, Tool] = {
    t.name: t
    for t in [
        Tool("read", "Read a text file.", _obj(path=_PATH), _read, side_effects=False),
        Tool(
            "list",
            "List a directory (default: the worktree root).",
            {"type": "object", "properties": {"path": _PATH}},
            _list,
            side_effects=False,
        ),
        Tool("write", "Replace a file's content.", _obj(path=_PATH, content=_CONTENT), _write),
        Tool(
            "append",
            "Append a line to a file.",
            _obj(path=_PATH, content=_CONTENT),
            _append,
        ),
        Tool("delete", "Delete a file.", _obj(path=_PATH), _delete),
        Tool(
            "wait",
            "Wait a number of seconds.",
            _obj(seconds={"type": "number"}),
            _wait,
            side_effects=False,
            afn=_await,
        ),
        Tool(
            "shell",
            "Run a shell command (/bin/sh -c) in the worktree, in a sandbox: the worktree is"
            " the current directory and the only writable place; no network.",
            _obj(command={"type": "string"}),
            _shell,
            blocks_on_error=True,
            afn=_ashell,
        ),
    ]
}


def available_tools() -> list[Tool]:
    """The tools offered to the model: ``shell`` only where it is enabled and its sandbox
    starts (``sandbox.unavailable_reason``)."""
    return [t for t in TOOLS.values() if t.name != "shell" or not sandbox.unavailable_reason()]
