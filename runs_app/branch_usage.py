"""Usage per branch (docs/semantics.md §14.6): what a session's own model calls used, apart from
what the history it was forked with cost where it came from, and per branch.

* ``own``: the sum of the ``usage`` of the session's own runs, the runs it ran itself. A fork
  copies its source's runs along the copied path (``services/fork.py``); the copies keep
  ``forked_from_session_id`` (the origin) and their original ``created_at``, from before the
  fork was made; the session's own runs have neither (the first is lost when the origin is
  deleted, the second stays). So ``own``
  is what the session's ``usage`` holds, and what the ledger (``quotas_app.UsageRecord``,
  one row per call, never copied) holds for the session: ``/api/usage/`` and the admin's
  dashboard count those rows, so no total there counts a copied call.
* ``inherited``: the calls that made the messages it was forked with (each assistant
  message records its call's usage in ``tokens``; its run is a copied one): what its history
  cost at the fork point, counted in its origin. A branch adopted from an alternative counts
  here too (``services/alternatives.py`` marks its copied runs with the alternative as
  origin). Zero for a session that is no fork and adopted nothing.
* ``branches``: for each leaf of the message tree (hidden messages aside, newest first, at
  most ``BRANCHES_MAX``), ``own`` = the own calls whose messages lie on the path root → leaf.
  Branches share their common start, so their sums overlap; each is at most ``own``, which
  also counts calls whose messages a cleanup or a rollback removed.

Two queries (the runs, the messages without parts) and one pass over them: linear in the
session's size.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import F, Q

from sessions_app.models import Message, Session

from .models import Run

KEYS = ("input_tokens", "output_tokens", "cached_input_tokens", "calls", "cost_usd")
BRANCHES_MAX = 100

Usage = dict[str, Any]


def zero() -> Usage:
    return {**dict.fromkeys(KEYS[:-1], 0), "cost_usd": 0.0}


def add(total: Usage, usage: dict[str, Any] | None) -> Usage:
    """``total`` plus ``usage`` (a run's ``usage`` or a call's, keys outside ``KEYS`` left
    out), as a new dict."""
    out = dict(total)
    for key, value in (usage or {}).items():
        if key == "cost_usd":
            out[key] = round(out[key] + float(value or 0), 8)
        elif key in out and isinstance(value, int | float):
            out[key] += int(value)
    return out


def branch_usage(session: Session) -> dict[str, Any]:
    own, own_runs = zero(), set()
    runs = Run.objects.filter(session=session).values_list(
        "id", "forked_from_session_id", "created_at", "usage"
    )
    for run_id, origin, created_at, usage in runs:
        # A copy keeps its original's time, from before the fork existed: it stays told
        # apart when the origin is deleted (the origin's key is then set to null).
        if origin is None and created_at >= session.created_at:
            own_runs.add(run_id)
            own = add(own, usage)

    inherited = zero()
    parents: dict[str, str | None] = {}
    spent: dict[str, Usage] = {}  # message -> its own call's usage
    has_visible_child: set[str] = set()
    visible: list[str] = []
    rows = Message.objects.filter(session=session).values_list(
        "id", "parent_id", "run_id", "role", "hidden", "tokens"
    )
    for mid, parent, run_id, role, hidden, tokens in rows:
        parents[mid] = parent
        if not hidden:
            visible.append(mid)
            if parent is not None:
                has_visible_child.add(parent)
        if role != Message.Role.ASSISTANT or not tokens:
            continue
        call = {**tokens, "calls": 1}
        if run_id in own_runs:
            spent[mid] = call
        else:
            inherited = add(inherited, call)

    leaves = sorted((m for m in visible if m not in has_visible_child), reverse=True)
    totals: dict[str, Usage] = {}
    branches = [
        {"head_message_id": leaf, "own": _path_total(leaf, parents, spent, totals)}
        for leaf in leaves[:BRANCHES_MAX]
    ]
    return {
        "own": own,
        "inherited": inherited,
        "branches": branches,
        "truncated": len(leaves) > BRANCHES_MAX,
    }


def inherited_of(session_ids: Iterable[str]) -> dict[str, Usage]:
    """Each session's ``inherited`` (as ``branch_usage`` counts it) for a bounded list of
    sessions, in one query: the calls of the assistant messages whose run is a copy (an
    origin named, or a time from before the session was made). Sessions with none are left
    out."""
    ids = list(session_ids)
    copied = Run.objects.filter(session_id__in=ids).filter(
        Q(forked_from_session_id__isnull=False) | Q(created_at__lt=F("session__created_at"))
    )
    rows = Message.objects.filter(
        session_id__in=ids, role=Message.Role.ASSISTANT, run_id__in=copied.values("id")
    ).values_list("session_id", "tokens")
    out: dict[str, Usage] = {}
    for sid, tokens in rows:
        if tokens:
            out[sid] = add(out.get(sid, zero()), {**tokens, "calls": 1})
    return out


def _path_total(
    leaf: str, parents: dict[str, str | None], spent: dict[str, Usage], totals: dict[str, Usage]
) -> Usage:
    """The own usage on the path root → ``leaf``; ``totals`` keeps every message's, so each
    message is added once whatever the number of branches through it."""
    stack: list[str] = []
    current: str | None = leaf
    while current is not None and current not in totals and len(stack) <= len(parents):
        stack.append(current)
        current = parents.get(current)
    total = totals[current] if current is not None and current in totals else zero()
    for mid in reversed(stack):
        if mid in spent:
            total = add(total, spent[mid])
        totals[mid] = total
    return total
