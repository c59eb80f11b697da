"""The chaos test at length (issue 25): ``./dev bench --only chaos [--minutes 30]``.

The driver of ``tests/e2e/chaos.py`` (Daphne, 3 worker processes, a private redis-server,
a database of its own beside the benchmark's), for ``--minutes`` of faults instead of the
suite's 90 seconds, with as many runs a minute as the suite's test (200 in 90 s, over 50
sessions). The report is the test's: the seed, the faults injected by kind, the runs by
outcome, the invariants checked and every violation. ``CHAOS_SEED`` repeats a run;
``--quick``: 3 minutes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .env import Env

RUNS_PER_SECOND = 200 / 90  # the suite's test


def run(env: Env, *, quick: bool, minutes: float = 30.0) -> dict[str, Any]:
    from tests.e2e.chaos import ChaosConfig, run_chaos

    seconds = 180.0 if quick else minutes * 60.0
    results = Path(__file__).resolve().parent / "results"
    results.mkdir(exist_ok=True)
    cfg = ChaosConfig(
        admin_url=env.database_url,
        workdir=env.workdir / "chaos",
        fault_seconds=seconds,
        runs=max(50, round(seconds * RUNS_PER_SECOND)),
        sessions=int(os.environ.get("CHAOS_SESSIONS", "50")),
        settle_seconds=600.0,
        keep_dir=results,
        log=lambda line: print(line, flush=True),
    )
    report = run_chaos(cfg)
    return {**report.as_dict(), "minutes": seconds / 60.0, "text": report.text()}


def report(result: dict[str, Any]) -> str:
    head = (
        f"Chaos ({result['minutes']:g} minutes of faults; services mode: Daphne, "
        f"{result['config']['workers']} Celery workers, PostgreSQL, a private Redis)"
    )
    body = "\n".join("  " + line for line in result["text"].splitlines())
    return f"{head}\n{body}"
