"""``python -m bench [--only NAME] [--quick]``: NAME in streaming, checkpoint, history, memory,
sandbox, undo, snapshots, repo, abort, fork, load, render, paint, quota, branches, api,
publish, whole_run, compiled, hosts, chaos.

``chaos`` (the chaos test at length: ``--minutes``, 30 by default) runs only when named with
``--only``; the others run by default.

Sets up a private environment (database ``agentplat_bench``, Redis db 5, free ports, a temp
workspace), runs the selected benchmarks, prints each result beside its floor or baseline with
the ratio, and writes everything to ``bench/results/latest.json``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any

from . import env as benv

BENCHES = (
    "streaming",
    "checkpoint",
    "history",
    "memory",
    "snapshots",
    "repo",
    "abort",
    "fork",
    "load",
    "sandbox",
    "undo",
    "render",
    "paint",
    "quota",
    "branches",
    "api",
    "publish",
    "fanout",
    "whole_run",
    "compiled",
    "hosts",
    "chaos",
)
# Run only when named (``--only chaos``): half an hour of faults.
ON_REQUEST = ("chaos",)
RESULTS = Path(__file__).resolve().parent / "results"


def _f(value: float, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.{digits}f}"


def _table(title: str, header: list[str], rows: list[list[str]], note: str = "") -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(  # noqa: E731
        str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i]) for i, c in enumerate(r)
    )
    out = [title, "  " + line(header), "  " + "  ".join("-" * w for w in widths)]
    out += ["  " + line(r) for r in rows]
    if note:
        out.append("  " + note)
    return "\n".join(out)


def headline_streaming(r: dict[str, Any]) -> str:
    """The README's rows: token latency p99 with the runs asked for through the API, as
    deployed (Daphne weighted), at equal weights, and while all the runs stream; the time
    to the first token."""
    rows = []
    for key, target in (("fifty", 50.0), ("many", 250.0)):
        deployed, equal = r.get(key), r.get(f"{key}_equal")
        if not deployed:
            continue
        shape = f"{deployed['sessions']} x {1000 / deployed['pace_ms']:.0f} tok/s"
        cells = [
            ("as deployed", deployed["p99_ms"]),
            ("equal weights", equal["p99_ms"] if equal else float("nan")),
            ("while all stream, as deployed", deployed["p99_all_streaming_ms"]),
            (
                "while all stream, equal weights",
                equal["p99_all_streaming_ms"] if equal else float("nan"),
            ),
        ]
        for how, value in cells:
            met = "met" if value <= target else "not met"
            rows.append([f"{shape}, {how}", f"≤ {_f(target, 0)}", _f(value), met])
        for label, s in (("as deployed", deployed), ("equal weights", equal)):
            if s and key == "fifty":
                value = s["ttft_p99_ms"]
                rows.append(
                    [
                        f"{shape}: time to the first token, {label}",
                        "≤ 1000",
                        f"{_f(value, 0)} (p50 {_f(s['ttft_p50_ms'], 0)})",
                        "met" if value <= 1000 else "not met",
                    ]
                )
    starts = r.get("starts")
    note = ""
    if starts:
        note = (
            f"a run's start and end (one token each, {starts['sessions']} at once), CPU ms per "
            f"run by process: {starts.get('cpu_ms_per_run_by_command')}"
        )
    return _table(
        "Streaming, the headline (runs asked for through the web process's API, all at once)",
        ["", "target ms", "p99 ms", ""],
        rows,
        note,
    )


def report_streaming(r: dict[str, Any]) -> str:
    fl = r["floor"]
    rows = [
        [
            "floor: Redis PUBLISH -> subscriber (loopback)",
            _f(fl["p50_ms"], 2),
            _f(fl["p99_ms"], 2),
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
        ],
    ]
    labels = (
        ("one", "host worker (1 process)"),
        ("fifty", "host worker (1 process)"),
        ("many", "host worker (1 process)"),
        ("fifty_equal", "host worker, equal CPU weights"),
        ("many_equal", "host worker, equal CPU weights"),
        ("old_fifty", f"old worker (prefork -c {r.get('old_fifty', {}).get('sessions', '?')})"),
    )
    for key, worker in labels:
        s = r.get(key)
        if not s:
            continue
        rows.append(
            [
                f"{s['sessions']} x {1000 / s['pace_ms']:.0f} tok/s, {worker}",
                _f(s["p50_ms"]),
                _f(s["p99_ms"]),
                f"{_f(s['produced_tokens_per_s'], 0)} / {_f(s['target_tokens_per_s'], 0)} "
                f"({_f(100 * s['produced_share'], 1)}%)",
                f"{s['delivered']}/{s['emitted']}",
                _f(s["worker_cpu_us_per_token"], 0),
                _f(s["daphne_cpu_us_per_token"], 0),
                _f(s["worker_peak_rss_mib"], 0),
                f"{_f(ratio_of(s['p99_ms'], fl['p99_ms']), 0)}x",
            ]
        )
    out = [
        _table(
            "Streaming: token emitted in the worker -> received by a websocket client "
            "(services mode, one Daphne, one worker process)",
            [
                "",
                "p50 ms",
                "p99 ms",
                "produced tok/s (of asked)",
                "delivered/emitted",
                "worker µs/token",
                "Daphne µs/token",
                "worker RSS MiB",
                "p99 / floor",
            ],
            rows,
            f"frames of STREAM_FRAME_MS={_f(r['frame_ms'], 0)} ms; host worker: "
            f"{r.get('worker', {}).get('command', '?')}; old worker: commit "
            f"{r.get('old_worker', {}).get('commit', '-')[:10]}; database: "
            f"{r.get('database', '?')}; CPU weights: {r.get('cpu_weights', '?')}",
        )
    ]
    for key in ("one", "fifty", "many", "fifty_equal", "many_equal", "old_fifty"):
        s = r.get(key)
        if not s or "p99_all_streaming_ms" not in s:
            continue
        out.append(
            f"  {s['sessions']} x {1000 / s['pace_ms']:.0f} tok/s"
            f"{' (old worker)' if key == 'old_fifty' else ''}: the runs asked for in "
            f"{_f(s['enqueue_seconds'], 1)} s, first tokens over "
            f"{_f(s['first_token_spread_s'], 1)} s; while all {s['sessions']} stream "
            f"({_f(s['all_streaming_s'], 1)} s): p50 {_f(s['p50_all_streaming_ms'])} ms, "
            f"p99 {_f(s['p99_all_streaming_ms'])} ms; CPU (cores) worker "
            f"{_f(s['worker_cpu_share'], 2)}, Daphne {_f(s['daphne_cpu_share'], 2)}, clients "
            f"{_f(s['clients_cpu_share'], 2)}"
        )
    out.append(headline_streaming(r))
    if "rss_mib_per_added_run" in r:
        out.append(
            f"  worker memory per added live run (RSS at {r['many']['sessions']} vs at "
            f"{r['fifty']['sessions']} runs, divided): {_f(r['rss_mib_per_added_run'], 3)} MiB"
        )
    if "old_vs_new" in r:
        o = r["old_vs_new"]
        out.append(
            f"  host vs old worker at {r['fifty']['sessions']} sessions: produced "
            f"{_f(o['produced'], 2)}x, p99 {_f(o['p99'], 1)}x lower, worker CPU per token "
            f"{_f(o['worker_cpu_per_token'], 1)}x less, worker RSS {_f(o['worker_rss'], 1)}x less"
        )
    if r.get("profile"):
        total, *top = r["profile"]
        out.append(
            f"  where the host loop's time goes (cProfile, 50 sessions, own time per token; "
            f"{_f(total['total_us_per_token'], 0)} µs in all, profiler overhead included):"
        )
        out += [f"    {_f(t['us_per_token'], 1):>7} µs  {t['function']}" for t in top]
    return "\n".join(out)


def ratio_of(a: float, b: float) -> float:
    return a / b if b else float("nan")


def report_checkpoint(r: dict[str, Any]) -> str:
    a, b = (r[str(s)] for s in r["sizes"])
    rows = [
        [
            "write statements per tool-batch checkpoint",
            _f(a["tool_batch_write_statements"], 0),
            _f(b["tool_batch_write_statements"], 0),
            _f(r["ratio_statements"], 2) + "x",
        ],
        [
            "bound-parameter bytes per tool-batch checkpoint",
            _f(a["tool_batch_bytes"], 0),
            _f(b["tool_batch_bytes"], 0),
            _f(r["ratio_bytes"], 2) + "x",
        ],
        [
            "write statements per run (2 steps)",
            _f(a["run_write_statements"], 0),
            _f(b["run_write_statements"], 0),
            _f(b["run_write_statements"] / a["run_write_statements"], 2) + "x",
        ],
        [
            "bound-parameter bytes per run",
            _f(a["run_write_bytes"], 0),
            _f(b["run_write_bytes"], 0),
            _f(b["run_write_bytes"] / a["run_write_bytes"], 2) + "x",
        ],
    ]
    sa, sb = r["sizes"]
    return _table(
        "Checkpoint cost (PostgreSQL, in-process run; median of samples)",
        ["", f"{sa} prior msgs", f"{sb} prior msgs", "ratio"],
        rows,
        "target: flat (ratio 1.0x)",
    )


def report_history(r: dict[str, Any]) -> str:
    a, b = (r[str(s)] for s in r["sizes"])
    sa, sb = r["sizes"]
    rows = [
        [
            "queries per step",
            _f(a["queries_per_step"], 1),
            _f(b["queries_per_step"], 1),
            _f(r["ratio_queries_per_step"], 2) + "x",
        ],
        [
            "queries of the history load (once per run)",
            _f(a["history_queries"], 0),
            _f(b["history_queries"], 0),
            _f(r["ratio_history_queries"], 2) + "x",
        ],
        [
            "history load ms (analyzed tables)",
            _f(a["history_ms"], 1),
            _f(b["history_ms"], 1),
            _f(r["ratio_history_ms"], 1) + "x",
        ],
        [
            "history load ms (stale planner stats)",
            _f(a["history_ms_stale_stats"], 1),
            _f(b["history_ms_stale_stats"], 1),
            _f(r["ratio_history_ms_stale_stats"], 1) + "x",
        ],
        [
            "whole run ms (2 steps, 2 tools)",
            _f(a["run_ms"], 1),
            _f(b["run_ms"], 1),
            _f(b["run_ms"] / a["run_ms"], 1) + "x",
        ],
    ]
    return _table(
        "History load (PostgreSQL, in-process run)",
        ["", f"{sa} prior msgs", f"{sb} prior msgs", "ratio"],
        rows,
        "target: constant queries (ratio 1.0x)",
    )


def report_memory(r: dict[str, Any]) -> str:
    e, late = r["at"]["early"], r["at"]["late"]
    rows = [
        [
            "worker RSS MiB (the worker process and its children)",
            _f(r["worker_early_mib"]),
            _f(r["worker_late_mib"]),
            _f(r["worker_ratio"], 3) + "x",
        ],
        [
            "daphne RSS MiB",
            _f(r["daphne_early_mib"]),
            _f(r["daphne_late_mib"]),
            _f(r["daphne_ratio"], 3) + "x",
        ],
    ]
    t1 = _table(
        f"Memory after sequential scripted runs ({r['runs']} runs in {_f(r['seconds'], 0)} s, "
        f"{r['failed_runs']} failed)",
        ["", f"after run {e}", f"after run {late}", "ratio"],
        rows,
        "target: within 10% (ratio <= 1.10x)",
    )
    t2 = _table(
        f"Daphne with {r['clients']} idle websocket clients",
        ["", "before", "connected", "after close", "MiB per client"],
        [
            [
                "daphne RSS MiB",
                _f(r["daphne_before_clients_mib"]),
                _f(r["daphne_with_clients_mib"]),
                _f(r["daphne_after_close_mib"]),
                _f(r["mib_per_client"], 3),
            ]
        ],
    )
    return t1 + "\n\n" + t2


def _record(
    results: dict[str, Any], printed: list[str], name: str, r: dict[str, Any], text: str
) -> None:
    """Keep a benchmark's results and print its report as soon as it is done."""
    results[name] = r
    printed.append(text)
    print("\n" + text + "\n", flush=True)


# The benchmarks run and reported the same way: name (--only), what is printed while it
# runs, its module, and whether it takes the environment (database, Redis, workdir).
SIMPLE = (
    ("snapshots", "snapshots", "snapshot_bench", False),
    (
        "repo",
        "snapshots at repository size (a project's sdist; 50,000 files, 500 MB)",
        "repo",
        False,
    ),
    ("fork", "session fork / checkpoint bytes vs agno", "fork", True),
    ("load", "load (50 sessions + 200 websockets + API; 100 prompts)", "load", True),
    ("abort", "abort / recovery", "abort", True),
    ("sandbox", "shell sandbox", "sandbox", False),
    ("undo", "a command past the byte limit, undone: layer vs in place", "undo", False),
    ("render", "chat rendering in Chromium, current vs old app.js", "render", True),
    ("paint", "chat paint figures in Chromium (FCP, LCP, TBT), before vs after", "paint", True),
    ("quota", "quota check on a run request, 1 and 1,000,000 usage rows", "quota", True),
    ("branches", "branches as workspaces (blame: 5,000 lines, 200 steps)", "branches", True),
    ("api", "web process CPU per API request, before vs after", "api_cost", True),
    ("publish", "publishing events: one Redis round trip a batch vs two", "publish", True),
    ("fanout", "web process CPU per websocket frame, before vs after", "fanout", True),
    ("whole_run", "a whole run writing one file, 50,000 files vs 10", "whole_run", True),
    ("compiled", "compiled statements vs the plain ORM, CPU per call", "compiled", True),
    ("hosts", "worker hosts: replication, re-homing, mirror reads, routing", "hosts", True),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", action="append", choices=BENCHES, help="run only this benchmark (repeatable)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="shorter streams, fewer samples, 200 runs for memory"
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=None,
        help="sequential runs for the memory benchmark (default 1000; 200 quick)",
    )
    parser.add_argument(
        "--sessions",
        type=int,
        default=50,
        help="concurrent sessions of the streaming benchmark (default 50)",
    )
    parser.add_argument(
        "--no-old",
        action="store_true",
        help="streaming: skip the old worker (prefork, one process per run) side by side",
    )
    parser.add_argument(
        "--clients",
        type=int,
        default=200,
        help="idle websocket clients for the memory benchmark (default 200)",
    )
    parser.add_argument(
        "--private-pg",
        choices=("auto", "yes", "no"),
        default="auto",
        help="use a throw-away PostgreSQL cluster (auto: when the shared "
        "server lacks free connections for the streaming run)",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=30.0,
        help="chaos: minutes of faults (default 30; --quick: 3)",
    )
    args = parser.parse_args(argv)
    selected = [b for b in BENCHES if (b in args.only if args.only else b not in ON_REQUEST)]
    runs = args.runs or (200 if args.quick else 1000)

    need = 2 * args.sessions + 20  # loop connection + short heartbeat visits, with margin
    private = args.private_pg == "yes"
    free = None
    if args.private_pg == "auto" and ("streaming" in selected or "load" in selected):
        free = benv.free_connections()
        private = free < need
    env = benv.make_env(private_pg=private)
    database = (
        f"private cluster on port {env.private_pg.port} (shared server had {free} free "
        f"connections, {args.sessions} running sessions need ~{need})"
        if env.private_pg
        else f"shared {benv.PG_HOST}:{benv.PG_PORT}"
    ) + f", db {benv.DB_NAME}"
    results: dict[str, Any] = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {
            "python": platform.python_version(),
            "cpus": _cpus(),
            "platform": platform.platform(),
        },
        "database": database,
        "redis": benv.REDIS_URL,
    }
    printed: list[str] = []
    try:
        benv.flush_redis()
        env.migrate()
        benv.setup_django(env)
        print(
            f"bench: database {database}; redis {benv.REDIS_URL}; workdir {env.workdir}", flush=True
        )
        if "streaming" in selected:
            print("bench: streaming ...", flush=True)
            from . import streaming

            r = streaming.run(env, quick=args.quick, sessions=args.sessions, old=not args.no_old)
            r["database"] = database
            _record(results, printed, "streaming", r, report_streaming(r))
        if "checkpoint" in selected or "history" in selected:
            print("bench: checkpoint / history ...", flush=True)
            from . import checkpoint

            r = checkpoint.run(env, quick=args.quick)
            if "checkpoint" in selected:
                _record(results, printed, "checkpoint", r, report_checkpoint(r))
            if "history" in selected:
                _record(results, printed, "history", r, report_history(r))
        if "memory" in selected:
            print(f"bench: memory ({runs} runs, {args.clients} clients) ...", flush=True)
            from . import memory

            r = memory.run(env, runs=runs, clients=args.clients)
            _record(results, printed, "memory", r, report_memory(r))
        if "chaos" in selected:
            minutes = 3.0 if args.quick else args.minutes
            print(f"bench: chaos ({minutes:g} minutes of faults) ...", flush=True)
            from . import chaos

            r = chaos.run(env, quick=args.quick, minutes=args.minutes)
            _record(results, printed, "chaos", r, chaos.report(r))
        for name, what, module, needs_env in SIMPLE:
            if name not in selected:
                continue
            print(f"bench: {what} ...", flush=True)
            bench = importlib.import_module(f"bench.{module}")
            r = bench.run(env, quick=args.quick) if needs_env else bench.run(quick=args.quick)
            _record(results, printed, name, r, bench.report(r))
    finally:
        env.close()
        RESULTS.mkdir(exist_ok=True)
        results["report"] = "\n\n".join(printed)
        (RESULTS / "latest.json").write_text(json.dumps(results, indent=2, default=str))
    print("=" * 100)
    print(results["report"])
    print(f"\nresults: {RESULTS / 'latest.json'}")
    return 0


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


if __name__ == "__main__":
    raise SystemExit(main())
