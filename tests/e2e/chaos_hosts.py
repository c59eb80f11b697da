"""The chaos test with several worker hosts (issue 45): ``ChaosConfig(hosts=2)``.

Each host has a name (``h0``, ``h1``…), a ``WORKSPACE_ROOT`` of its own and some of the
workers; the web holds no worktree (``WORKSPACE_ROOT=""``); every step is replicated to a
central store, the https git server of tests/support/git_server.py. The hosts share loopback
here (tests/e2e/test_multi_host.py is the test of the network namespaces).

**A host kill** (the fault ``kill_host``): every worker of the host SIGKILLed, its root
deleted; a fresh host of a new name (an empty root) takes its workers' places a moment later,
so a host that died never comes back. Its sessions are re-homed by the sweep and their claims
(sessions_app/rehome.py). Worker faults (SIGKILL, SIGSTOP) only pick a worker whose host keeps
another running, so only ``kill_host`` makes a host die.

**What a host's loss may cost** (docs/semantics.md §1.7, issue 45 step 2): what was not yet
replicated. At each kill, ``record_loss`` notes, for each session homed there, the snapshot
replicated then and the side-effect calls already ``completed`` whose line the replicated files
do not hold: those lines are lost with the disk (counted in the report). The run's recovery on
the claiming host makes each such call an error that says so (docs/semantics.md §16.5), so the
checks forgive nothing: a call still ``completed`` at the end whose line is missing is a
violation, as with one host. A session moved to a host that has not run it since (re-homing
is lazy) has no worktree there: its files are the store's, its replicated snapshot.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.git_server import GIT, GitServer, git_server


@dataclass
class Loss:
    host: str
    at: float
    sessions: int = 0
    calls_lost: int = 0


@dataclass
class HostPool:
    """The hosts of a multi-host chaos run, their roots and the central store."""

    workdir: Path
    count: int
    roots: dict[str, Path] = field(default_factory=dict)
    dead: list[str] = field(default_factory=list)
    losses: list[Loss] = field(default_factory=list)
    # (session, part) of completed calls whose line a host's loss took (for the report and
    # a violation's evidence: each must end an error, docs/semantics.md §16.5).
    lost_calls: set[tuple[str, str]] = field(default_factory=set)
    lost_sessions: set[str] = field(default_factory=set)  # homed on a host when it died
    store: GitServer | None = None
    _exit: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def start(self) -> None:
        self.store = self._exit.enter_context(git_server(self.workdir / "store"))
        self.store.make_repo("central", {"README": "the central store\n"})
        for _ in range(self.count):
            self.fresh()

    def stop(self) -> None:
        self._exit.close()

    def env(self) -> dict[str, str]:
        """What every process of the deployment is given for the central store."""
        assert self.store is not None
        return {
            "SNAPSHOT_REMOTE": self.store.url("central"),
            "SNAPSHOT_REMOTE_TOKEN": self.store.token,
            "GIT_SSL_CAINFO": str(self.store.ca_file),
        }

    def fresh(self) -> str:
        name = f"h{len(self.roots)}"
        self.roots[name] = self.workdir / f"root-{name}"
        self.roots[name].mkdir(parents=True, exist_ok=True)
        return name

    def live(self) -> list[str]:
        return [name for name in self.roots if name not in self.dead]

    def worktree(self, host: str, sid: str) -> Path | None:
        root = self.roots.get(host)
        return root / sid if root is not None and host not in self.dead else None

    def blob(self, tree: str, name: str) -> bytes | None:
        """A file of a replicated tree, from the central store's bare repository."""
        assert self.store is not None
        if not tree:
            return None
        out = subprocess.run(
            [
                GIT,
                "--git-dir",
                str(self.store.bare("central")),
                "cat-file",
                "blob",
                f"{tree}:{name}",
            ],
            capture_output=True,
            env={"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1"},
        )
        return out.stdout if out.returncode == 0 else None

    def lines(self, tree: str, name: str) -> Counter:
        data = self.blob(tree, name)
        return Counter(data.decode(errors="replace").splitlines()) if data else Counter()

    def record_loss(
        self,
        host: str,
        at: float,
        rows: list[dict[str, Any]],
        parts: list[dict[str, Any]],
        side_effect_of: Callable[[str, Any], tuple[str, str] | None],
    ) -> Loss:
        """``rows``: the sessions homed on ``host`` when it died (id, replicated_snapshot);
        ``parts``: their tool parts then; ``side_effect_of``: chaos.py's (a call's file and
        line). See the module."""
        self.dead.append(host)
        loss = Loss(host, at, sessions=len(rows))
        tree_of = {r["id"]: r["replicated_snapshot"] for r in rows}
        self.lost_sessions |= set(tree_of)
        held: dict[tuple[str, str], Counter] = {}
        for p in parts:
            state = p["state"] if isinstance(p["state"], dict) else json.loads(p["state"] or "{}")
            effect = side_effect_of(p["tool"], state.get("input"))
            if effect is None or state.get("status") != "completed":
                continue
            sid = p["session_id"]
            name, line = effect
            if (sid, name) not in held:
                held[(sid, name)] = self.lines(tree_of.get(sid, ""), name)
            if not held[(sid, name)][line]:
                self.lost_calls.add((sid, p["id"]))
                loss.calls_lost += 1
        self.losses.append(loss)
        return loss

    def summary(self) -> list[str]:
        return [
            f"host {x.host} lost at {x.at:.1f} s: {x.sessions} sessions homed there, "
            f"{x.calls_lost} completed calls not yet replicated (lost with its disk)"
            for x in self.losses
        ]
