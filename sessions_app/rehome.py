"""Re-homing a session on the host that claims its work (issue 45, step 4), and draining a
host (``manage.py drain_host``).

**On a claim.** A worker that begins a run of a session (``runs_app/execution/host.py``,
right after ``lifecycle.begin`` took the session) calls ``on_claim``. When the central store
is on (``SNAPSHOT_REMOTE``), the session has a replicated snapshot and its worktree is not on
this host (``WORKSPACE_ROOT/<id>`` absent, or empty with no snapshot of this host's behind it),
the worktree is materialised from the store: the session's ref is fetched into its snapshot
store (``replication.fetch``: the hardened remote runner, never the worktree), its tree is
checked out into a new worktree (``Snapshots.materialize``, which also sets the index and
``last-tree``, so the next snapshot is right) and the session's home moves here. The session
then has its files as of its last replicated step (docs/semantics.md §16).

A session never replicated whose worktree is gone is not given anything here: it runs as
today (the loop snapshots whatever it finds, an empty worktree). Without the store (one host,
or a shared volume) nothing is materialised; the home only moves here when the old home is
dead, so its next work comes to a live host's queue. A session with no home (made while no
host was live) is homed here when the store is on (its files are made here, and its next
work must come here, not to any host); on a shared volume it stays any host's, as before.

The home moves by a compare-and-set on the row (still the old host): a drain or another
claim that moved it in between wins.

**A stale copy.** A host may still hold a worktree of a session that lived elsewhere since
(drained away, or moved while this host was stopped past its lease, and now back). When the
store is on, this host's copy is trusted only if its last snapshot is the replicated one or
this host's snapshot store holds the replicated commit (it pushed it or fetched it, so what it
has is that or newer); else the copy is set aside and the worktree materialised from the store.

**Draining.** ``drain`` marks the host draining (``place`` skips it) and moves every idle
session homed there to the live, non-draining host with the fewest sessions; a busy one stays
(its run ends where it is) and is reported, for the operator to drain again.

**Dead hosts, in the background.** Every worker's sweep (runs_app/execution/sweeper.py) calls
``sweep_dead``: the idle sessions of hosts whose beat is older than the lease (or that have no
host row at all) move to live, non-draining hosts, the fewest sessions first, by the same
compare-and-set as a drain (a session that a run took meanwhile stays), at most
``SWEEP_BATCH`` per sweep (a host of thousands of sessions is moved over a few sweeps, no
sweep holds the others up). A busy session of a dead host is not moved here: its run's lease
lapses and the sweep enqueues it again (today's crash rules); its dead home sends it to the
default queue (``hosts.queue_for``), and the worker that takes it re-homes it (``on_claim``).

*Lazy, not eager.* The move is the row only; the files are materialised by the next claim on
the new home (a run, a prepare job), as for a run whose home died mid-run. The sweeping
worker is one host and the new home may be another: an eager copy would need a task on the
new home's queue per session, and would spend the disk and the time of every dead session's
files at once (a host of thousands, most never opened again) while the store holds them safe
in the meantime. The cost is the first run's: it waits for the materialisation (a fetch and
a checkout, ``./dev bench --only hosts``). The home moves at once so that new work is routed to
a live host's queue, not the default one.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from dataclasses import dataclass, field
from enum import Enum

from django.conf import settings

from workspace import linked_rehome, replication, snapshots

from . import hosts
from .models import Host, Session

log = logging.getLogger(__name__)

SWEEP_BATCH = 200  # sessions of dead hosts moved by one sweep of one worker, at most
LOST_NOTE = "lost-with"  # in the session's snapshot dir: see ``mark_lost``


class Plan(Enum):
    STAY = "stay"  # nothing to do
    MOVE = "move"  # the home moves here; the files are where they are
    MATERIALIZE = "materialize"  # the files come from the central store, then the home moves


def worktree_missing(session: Session) -> bool:
    """Whether this host lacks the session's worktree: no directory, or an empty one that no
    snapshot of this host stands behind (an agent that deleted every file leaves a snapshot)."""
    worktree = session.worktree
    if not worktree.is_dir():
        return True
    if any(worktree.iterdir()):
        return False
    return not (session.snapshot_dir / "last-tree").is_file()


def worktree_stale(session: Session) -> bool:
    """(The store on, the session replicated, a worktree here.) Whether this host's copy is
    older than the replicated snapshot: its last snapshot is not that one, and its snapshot
    store lacks the replicated commit (it neither pushed nor fetched it): the session lived
    on another host since this one last had it."""
    tree, commit = session.replicated_snapshot, session.replicated_commit
    last = session.snapshot_dir / "last-tree"
    if last.is_file() and last.read_text().strip() == tree:
        return False
    if not commit:
        return False
    snap = snapshots.for_session(session)
    snap.ensure()
    return snap.run(["cat-file", "-e", f"{commit}^{{commit}}"]).code != 0


def lacks_files(session: Session) -> bool:
    """This host has no current copy of the session's files: none, or a stale one."""
    if worktree_missing(session):
        return True
    return bool(replication.enabled() and session.replicated_snapshot) and worktree_stale(session)


def plan(session: Session, here: str, *, home_live: bool, missing: bool) -> Plan:
    """What a claim on host ``here`` does for ``session`` (the decision alone, for tests)."""
    if replication.enabled() and session.replicated_snapshot and missing:
        return Plan.MATERIALIZE
    if session.host and session.host != here and not home_live:
        return Plan.MOVE
    if not session.host and replication.enabled():
        return Plan.MOVE  # no home, hosts without a shared disk: its files are made here
    return Plan.STAY


def on_claim(session: Session) -> Plan:
    """(A worker thread, the session held by the run beginning here.) Re-home ``session`` on
    this host if it must be: what was done. A materialisation that fails is logged and the
    run goes on as it would have (the same as a session never replicated)."""
    here = settings.WORKER_HOST
    home_live = session.host == here or hosts.is_live(session.host)
    chosen = plan(session, here, home_live=home_live, missing=lacks_files(session))
    if chosen is Plan.MATERIALIZE:
        try:
            materialize(session)
        except (replication.ReplicationError, snapshots.SnapshotError, OSError) as exc:
            log.warning("session %s: not re-homed from the central store: %s", session.id, exc)
            return Plan.STAY
    if chosen is not Plan.STAY and session.host != here:
        moved = Session.objects.filter(id=session.id, host=session.host).update(host=here)
        if moved:
            log.info("session %s re-homed from %r to %r", session.id, session.host, here)
            session.host = here
    return chosen


def materialize(session: Session) -> None:
    """The session's worktree on this host from its last replicated snapshot."""
    snap = snapshots.for_session(session)
    snap.ensure()
    replication.fetch(snap, session.id)
    tree = session.replicated_snapshot
    if snap.run(["cat-file", "-e", f"{tree}^{{tree}}"]).code != 0:
        raise replication.ReplicationError(f"The store has no tree {tree} for the session.")
    mark_lost(session, tree)
    _set_aside(session)
    session.worktree.mkdir(parents=True, exist_ok=True)
    linked_rehome.materialize(snap, tree)  # by hard link from a same-tree session, if any


def mark_lost(session: Session, tree: str) -> None:
    """Before this host makes the session's files anew (``tree``: what they will be), note
    that the old home's were lost with it (its name): the run's recovery says so of the calls
    that tree lacks, and clears the note once that is written (docs/semantics.md §16.5). On
    this host's disk, beside the snapshots, so that a worker of this host killed in between
    leaves it for the next claim. A new file, then a rename."""
    session.snapshot_dir.mkdir(parents=True, exist_ok=True)
    note = session.snapshot_dir / LOST_NOTE
    fresh = note.with_name(f"{LOST_NOTE}.{uuid.uuid4().hex[:8]}")
    fresh.write_text(f"{tree} {session.host}\n")
    fresh.replace(note)


def lost_mark(session: Session) -> tuple[str, str] | None:
    """(tree, lost host) of ``mark_lost`` not yet cleared, or None."""
    try:
        tree, _, host = (session.snapshot_dir / LOST_NOTE).read_text().strip().partition(" ")
    except FileNotFoundError:
        return None
    return (tree, host) if tree else None


def clear_lost_mark(session: Session) -> None:
    (session.snapshot_dir / LOST_NOTE).unlink(missing_ok=True)


def _set_aside(session: Session) -> None:
    """A stale copy of the worktree out of the way (renamed first, so that no half-deleted
    worktree is ever the session's), then deleted."""
    worktree = session.worktree
    if not worktree.exists():
        return
    aside = worktree.with_name(f".stale-{session.id}-{uuid.uuid4().hex[:8]}")
    worktree.rename(aside)
    shutil.rmtree(aside, ignore_errors=True)
    log.info("session %s: a stale copy of its worktree set aside", session.id)


@dataclass
class Drained:
    moved: list[tuple[str, str]] = field(default_factory=list)  # (session, new host)
    busy: list[str] = field(default_factory=list)
    stranded: list[str] = field(default_factory=list)  # idle, but no live host to go to


def drain(name: str) -> Drained:
    """Mark host ``name`` draining and move its idle sessions (see the module's docstring)."""
    Host.objects.filter(name=name).update(draining=True)
    done = Drained()
    for sid, busy in Session.objects.filter(host=name).values_list("id", "busy_run_id"):
        if busy:
            done.busy.append(sid)
            continue
        target = _least_loaded(exclude=name)
        if not target:
            done.stranded.append(sid)
            continue
        # Idle at the move (the row still names this host and no run holds it).
        if Session.objects.filter(id=sid, host=name, busy_run_id__isnull=True).update(host=target):
            done.moved.append((sid, target))
        else:
            done.busy.append(sid)
    return done


def _least_loaded(exclude: str) -> str:
    candidates = hosts.live_hosts().filter(draining=False).exclude(name=exclude)
    chosen = hosts.with_session_counts(candidates).order_by("n_sessions", "name").first()
    return chosen.name if chosen else ""


def sweep_dead(limit: int = SWEEP_BATCH) -> list[tuple[str, str, str]]:
    """Move idle sessions of dead hosts to live, non-draining hosts, the fewest sessions
    first (see the module's docstring): [(session, old home, new home)]."""
    spread = hosts.Spread()
    if not spread.counts:
        return []
    orphans = hosts.on_dead_hosts(Session.objects.filter(busy_run_id__isnull=True))
    moved = []
    for sid, old in orphans.values_list("id", "host")[:limit]:
        target = spread.next()
        idle = Session.objects.filter(id=sid, host=old, busy_run_id__isnull=True)
        if idle.update(host=target):
            spread.took(target)
            moved.append((sid, old, target))
    return moved
