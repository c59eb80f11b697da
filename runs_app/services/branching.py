"""Continue and regenerate (docs/semantics.md §5.1–§5.4, §5.6): a run goes on from a point of its
transcript, on a branch of the conversation tree that starts there.

The request only decides *where*: the cut K (snapped to a tool-safe index), the message the
branch hangs from, and the files as they were there. The loop applies it when it starts
(``execution/loop/start.py``, ``start_branch``), under the session's busy lock, so a queued
continuation never moves the head or the files under a running run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from core.errors import ConflictError, InvalidInput
from sessions_app.models import Message, Part
from sessions_app.selectors import active_path, files_at
from sessions_app.services import lock

from ..lifecycle import RESTARTABLE, admit, restart
from ..models import Run
from ..transcript import entry_ends

IN_PLACE = set(RESTARTABLE)


@dataclass(frozen=True)
class Cut:
    keep: int  # messages of the path kept
    index: int  # the snapped K: transcript entries kept


def run_path(run: Run) -> list[Message]:
    """The run's conversation: root → the run's newest message (its transcript's messages)."""
    leaf = Message.objects.filter(run_id=run.id).order_by("-id").values_list("id", flat=True)
    leaf_id = leaf.first()
    if leaf_id is None and run.branch:
        leaf_id = run.branch.get("parent_message_id")  # a branch that added nothing yet
    return active_path(run.session, leaf_id=leaf_id) if leaf_id else []


def snap(ends: list[int], k: int, *, system: bool) -> Cut:
    """docs/semantics.md §5.2: the largest tool-safe index ≤ K, and how many messages that keeps. A
    cut inside a message's entries (between a tool call and its results) moves to the message's
    start; applying it twice changes nothing."""
    cut = Cut(0, 1 if system and k >= 1 else 0)
    for i, end in enumerate(ends):
        if end > k:
            break
        if end > cut.index:
            cut = Cut(i + 1, end)
    return cut


def resolve_cut(path: list[Message], continue_from: Any, *, system_prompt: str) -> Cut:
    ends = entry_ends(path, system_prompt)
    total = ends[-1] if ends else (1 if system_prompt else 0)
    if continue_from == "end":
        return Cut(len(path), total)
    if continue_from == "last_user":
        last = max((i for i, m in enumerate(path) if m.role == Message.Role.USER), default=None)
        if last is None:
            return Cut(0, 1 if system_prompt else 0)
        return Cut(last + 1, ends[last])
    if isinstance(continue_from, bool) or not isinstance(continue_from, int):
        raise InvalidInput("continue_from must be 'end', 'last_user' or a message index K ≥ 0.")
    if continue_from < 0:
        raise InvalidInput("continue_from must be 'end', 'last_user' or a message index K ≥ 0.")
    if continue_from >= total:
        return Cut(len(path), total)  # the whole transcript: the same as "end"
    return snap(ends, continue_from, system=bool(system_prompt))


def _check_not_reverted(run: Run) -> None:
    if run.session.revert:
        raise ConflictError("A revert is pending: unrevert or confirm it first.")


def continue_run(
    *,
    run: Run,
    user,  # noqa: ANN001
    continue_from: str | int = "end",
    input: list[dict[str, str]] | None = None,
    fork: bool = False,
    multitask_strategy: str = "reject",
) -> Run:
    """docs/semantics.md §5.1–§5.4. A ``completed`` run (or any run with ``fork``) gets a new
    sibling run in the same session; a ``cancelled`` or ``error`` run continues in place. The
    arguments' shape is the API's to check (``runs_app.api.serializers.ContinueIn``): ``input`` is a
    list of ``{role: "user", content}``."""
    messages = list(input or [])
    _check_not_reverted(run)
    path = run_path(run)
    if not path:
        raise ConflictError(f"Run {run.id} has no transcript to continue from.")
    cut = resolve_cut(path, continue_from, system_prompt=run.session.system_prompt)
    in_place = not fork and run.status in IN_PLACE
    if not fork and not in_place and run.status != Run.Status.COMPLETED:
        raise ConflictError(
            f"Run {run.id} is still {run.status}: cancel it first, or pass fork: true."
        )
    branch = {
        "parent_message_id": path[cut.keep - 1].id if cut.keep else None,
        "continue_from": continue_from,
        "index": cut.index,
        "input": messages,
        "files": files_at(path, cut.keep),
        "source_run_id": run.id,
        "applied": False,
    }
    if in_place:
        return _restart(run, user, branch, multitask_strategy)
    return _fork(run, user, branch, cut, Run.Mode.CONTINUE, multitask_strategy)


def regenerate_run(
    *,
    run: Run,
    user,  # noqa: ANN001
    replace_original: bool = True,
    multitask_strategy: str = "reject",
) -> Run:
    """docs/semantics.md §5.6: drop the run's trailing assistant messages that called no tools and
    answer again from there, as a new sibling run. Tool results before the cut are kept, so no tool
    runs again. The arguments' shape is checked at the door (``RegenerateIn``)."""
    _check_not_reverted(run)
    if not run.is_terminal:
        raise ConflictError(f"Run {run.id} is still {run.status}: wait for it or cancel it.")
    path = run_path(run)
    if not path:
        raise ConflictError(f"Run {run.id} has no answer to regenerate.")
    keep = len(path)
    while (
        keep
        and path[keep - 1].role == Message.Role.ASSISTANT
        and path[keep - 1].run_id == run.id
        and not any(p.type == Part.Type.TOOL for p in path[keep - 1].loaded_parts)
    ):
        keep -= 1
    ends = entry_ends(path, run.session.system_prompt)
    cut = Cut(keep, ends[keep - 1] if keep else (1 if run.session.system_prompt else 0))
    dropped = [m.id for m in path[keep:]]
    branch = {
        "parent_message_id": path[keep - 1].id if keep else None,
        "continue_from": cut.index,
        "index": cut.index,
        "input": [],
        "files": files_at(path, keep),
        "source_run_id": run.id,
        "hide": dropped if replace_original else [],
        "replaces": run.id if replace_original else None,
        "applied": False,
    }
    return _fork(run, user, branch, cut, Run.Mode.REGENERATE, multitask_strategy)


def _fork(run: Run, user, branch: dict, cut: Cut, mode: str, strategy: str) -> Run:  # noqa: ANN001
    with transaction.atomic():
        locked = lock.lock_session(run.session_id)
        new = Run(
            session=locked,
            mode=mode,
            input=branch["input"],
            model=run.model or locked.model,
            checkpoint=run.checkpoint or locked.checkpoint,
            multitask_strategy=strategy,
            max_steps=run.max_steps,
            forked_from_run=run,
            forked_from_message_index=cut.index,
            branch=branch,
            created_by=user if getattr(user, "is_authenticated", False) else None,
        )
        return admit(locked, new)


def _restart(run: Run, user, branch: dict, strategy: str) -> Run:  # noqa: ANN001
    """In place: the same run id goes back to ``pending`` with its new branch."""
    with transaction.atomic():
        locked = lock.lock_session(run.session_id)  # the session row before the run's
        current = Run.objects.select_for_update().get(id=run.id)
        if current.status not in IN_PLACE:
            raise ConflictError(f"Run {run.id} is {current.status} now; try again.")
        # admit (in restart) announces the run (run.updated) after commit.
        return restart(locked, current, branch=branch, multitask_strategy=strategy)
