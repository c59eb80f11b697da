"""Tools the agent may call. All of them act inside the session worktree only."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from sessions_app.git_names import git_refuses
from sessions_app.tools_paths import PATH_MAX, check_lengths

from . import sandbox
from .sandbox import worktree_bytes


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


def resolve(worktree: Path, relative: Any, *, allow_root: bool = False) -> Path:
    """The path inside ``worktree``; refuses absolute paths, ``..`` and symlinks leading out."""
    if not isinstance(relative, str) or (not relative.strip() and not allow_root):
        raise ToolError("A path is required.")
    relative = relative.strip() or "."
    if "\0" in relative:
        raise ToolError("Invalid path.")
    if os.path.isabs(relative) or relative.startswith("~"):
        raise ToolError(f"Path escapes the worktree: {relative} (absolute paths are refused).")
    parts = Path(relative).parts
    if ".." in parts:
        raise ToolError(f"Path escapes the worktree: {relative} ('..' is refused).")
    if any(part == ".git" for part in parts):
        raise ToolError(f"Path {relative} is inside .git, which tools do not touch.")
    if parts and git_refuses("/".join(parts)):
        # Snapshots are git trees: a name git refuses would never be recorded, and names
        # such as .GIT or git~1 are how attacks on git reach its own directory.
        raise ToolError(f"Path {relative} is a name git refuses (a form of .git); pick another.")
    try:
        # Over-long names would reach the filesystem as ENAMETOOLONG, an OSError, not a
        # tool error the model can read and correct.
        check_lengths(parts)
    except ValueError as exc:
        raise ToolError(f"Invalid path: {exc}") from exc
    root = worktree.resolve()
    target = root.joinpath(*parts) if parts else root
    if len(os.fsencode(str(target))) >= PATH_MAX:
        raise ToolError(f"Invalid path: it is longer than {PATH_MAX - 1} bytes.")
    # Follow every symlink on the way; the real location must stay inside the worktree.
    real = Path(os.path.realpath(target))
    if real != root and root not in real.parents:
        raise ToolError(f"Path escapes the worktree: {relative} (a symlink leads outside).")
    if target == root and not allow_root:
        raise ToolError("A file path is required.")
    return target


def _text_arg(args: dict[str, Any], name: str) -> str:
    value = args.get(name, "")
    if not isinstance(value, str):
        raise ToolError(f"'{name}' must be a string.")
    return value


def _read(ctx: ToolContext, args: dict[str, Any]) -> str:
    path = resolve(ctx.worktree, args.get("path"))
    if not path.is_file():
        raise ToolError(f"No such file: {args.get('path')}")
    data = path.read_bytes()
    if len(data) > 1_000_000:
        raise ToolError("File is larger than 1 MB.")
    return data.decode("utf-8", errors="replace")


def _list(ctx: ToolContext, args: dict[str, Any]) -> str:
    path = resolve(ctx.worktree, args.get("path", "") or "", allow_root=True)
    if not path.is_dir():
        raise ToolError(f"No such directory: {args.get('path') or '.'}")
    entries = []
    for child in sorted(path.iterdir()):
        if child.name == ".git":
            continue
        entries.append(child.name + ("/" if child.is_dir() else ""))
    return "\n".join(entries)


def _check_room(ctx: ToolContext, path: Path, size: int) -> None:
    """Refuse a write that would make the file or the worktree larger than the deployment
    allows (``WORKTREE_MAX_FILE_BYTES``, the owner's ``worktree_bytes``): a tool error the model
    reads, before anything is written."""
    file_limit, tree_limit = settings.WORKTREE_MAX_FILE_BYTES, ctx.worktree_limit
    if file_limit and size > file_limit:
        raise ToolError(
            f"{path.name} would be {size:,} bytes; a file may hold at most {file_limit:,} bytes."
        )
    if tree_limit:
        old = path.stat().st_size if path.is_file() else 0
        total = worktree_bytes(ctx.worktree) - old + size
        if total > tree_limit:
            raise ToolError(
                f"The worktree would hold {total:,} bytes; it may hold at most {tree_limit:,}."
                " Delete files first."
            )


def _write_file(path: Path, content: str, *, append: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # O_NOFOLLOW: never write through a symlink swapped in after the check.
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        raise ToolError(f"Cannot write {path.name}: {exc.strerror}.") from exc
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
        fh.write(content)


def _write(ctx: ToolContext, args: dict[str, Any]) -> str:
    path = resolve(ctx.worktree, args.get("path"))
    content = _text_arg(args, "content")
    if path.is_dir():
        raise ToolError(f"{args.get('path')} is a directory.")
    _check_room(ctx, path, len(content.encode()))
    _write_file(path, content, append=False)
    return f"Wrote {len(content.encode())} bytes to {args.get('path')}."


def _append(ctx: ToolContext, args: dict[str, Any]) -> str:
    path = resolve(ctx.worktree, args.get("path"))
    content = _text_arg(args, "content")
    if path.is_dir():
        raise ToolError(f"{args.get('path')} is a directory.")
    old = path.stat().st_size if path.is_file() else 0
    _check_room(ctx, path, old + len(content.encode()) + 1)
    _write_file(path, content + "\n", append=True)
    return f"Appended {len(content.encode()) + 1} bytes to {args.get('path')}."


def _delete(ctx: ToolContext, args: dict[str, Any]) -> str:
    path = resolve(ctx.worktree, args.get("path"))
    if path.is_symlink() or path.is_file():
        path.unlink()
        return f"Deleted {args.get('path')}."
    if path.is_dir():
        raise ToolError(f"{args.get('path')} is a directory.")
    raise ToolError(f"No such file: {args.get('path')}")


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
    outcome = await sandbox.run(
        ctx.worktree,
        command,
        on_output=ctx.output,
        should_stop=ctx.should_abort,
        tree_limit=ctx.worktree_limit,
    )
    out = outcome.output
    if outcome.truncated:
        out += f"\n[output cut at {settings.AGENT_SHELL_OUTPUT_MAX:,} characters]"
    if outcome.stopped == "stopped":
        raise ToolInterrupted(out)
    if outcome.stopped == "timeout":
        raise ToolError(
            f"Command timed out after {settings.AGENT_SHELL_TIMEOUT:g} seconds and was killed.\n"
            + out
        )
    if outcome.stopped == "worktree-size":
        raise ToolError(
            f"Command killed: the worktree grew past {ctx.worktree_limit:,} bytes.\n" + out
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
