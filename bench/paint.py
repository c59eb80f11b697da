"""The chat's paint figures before and after a change (issue 28, "Measured"), Lighthouse's
way, from Chromium's own performance entries: first contentful paint (FCP), largest
contentful paint (LCP), total blocking time (TBT: the part over 50 ms of each long task from
FCP until the page is settled) and the time to the last message shown, at 1280 px (desktop)
and 390 px (a phone: touch, scale 3), in a 10-message and a 2,000-message session.

"Before" is the project at ``PAINT_BEFORE`` (a commit; default ``BEFORE``), "after" the
working tree. Each is served by its own Daphne from its own copy of the tree (``git archive``
of the commit into a temporary directory; templates, static files and Python all of that
commit), both against the same database and the same sessions, and the loads alternate
between them in one run, so the machine's load falls on both alike. Settled: the last
message shown, then no long task for a second (at most 10 s). One unmeasured load of each
first; the p50 of ``PAINT_LOADS`` (5; quick 3) loads each.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .env import ROOT, VENV_BIN, Env, free_port, wait_port
from .render import CHROMIUM, CHROMIUM_ARGS, INIT_SCRIPT, PASSWORD, build_session, logged_in
from .stats import ratio

BEFORE = "345670b"  # the chat before issue 28
WIDTHS = {
    "1280": {"viewport": {"width": 1280, "height": 900}},
    "390": {
        "viewport": {"width": 390, "height": 844},
        "device_scale_factor": 3,
        "is_mobile": True,
        "has_touch": True,
    },
}
SIZES = {"10 messages": 5, "2,000 messages": 1000}  # turns

# Long tasks and paints, buffered from the page's start (Lighthouse's inputs).
PAINT_SCRIPT = """
(() => {
  const perf = (window.__paint = { long: [], lcp: null });
  try {
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) perf.long.push([e.startTime, e.duration]);
    }).observe({ type: "longtask", buffered: true });
    new PerformanceObserver((list) => {
      const all = list.getEntries();
      perf.lcp = all[all.length - 1].startTime;
    }).observe({ type: "largest-contentful-paint", buffered: true });
  } catch (e) { perf.error = String(e); }
})();
"""

READ = """() => {
  const mark = window.__renderBench, perf = window.__paint;
  const fcp = performance.getEntriesByName('first-contentful-paint')[0];
  const start = fcp ? fcp.startTime : 0;
  const tbt = perf.long.filter(([s]) => s >= start)
    .reduce((sum, [, d]) => sum + Math.max(0, d - 50), 0);
  const lastLong = perf.long.length ? Math.max(...perf.long.map(([s, d]) => s + d)) : 0;
  const nav = performance.getEntriesByType('navigation')[0] || {};
  // What the page fetched before the message was in the DOM (for reading where time goes).
  const fetched = performance.getEntriesByType('resource')
    .filter((e) => e.responseEnd <= (mark.found || 0))
    .map((e) => [new URL(e.name).pathname.replace(/ses_[0-9a-z]+/, '{id}'),
                 Math.round(e.startTime), Math.round(e.responseEnd)]);
  return { fcp: fcp ? fcp.startTime : null, lcp: perf.lcp, tbt, shown: mark.shown,
           found: mark.found, html: nav.responseEnd, dcl: nav.domContentLoadedEventEnd,
           fetched, long: perf.long.length, lastLong, now: performance.now() };
}"""


def _tree_of(commit: str, into: Path) -> str:
    """The project at ``commit``, unpacked into ``into``; the full commit id."""
    full = subprocess.run(
        ["git", "rev-parse", "--verify", f"{commit}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    archive = subprocess.Popen(["git", "archive", full], cwd=ROOT, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    archive.wait()
    return full


def _serve(env: Env, name: str, tree: Path) -> tuple[Any, int]:
    port = free_port()
    proc = env.spawn(
        f"daphne-{name}-{port}",
        [str(VENV_BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"],
        cwd=tree,
        PYTHONPATH=str(tree),
    )
    wait_port(port, proc=proc.popen)
    return proc, port


def _load(context: Any, url: str) -> dict[str, Any]:
    page = context.new_page()
    try:
        page.goto(url, wait_until="commit")
        page.wait_for_function(
            "() => window.__renderBench && window.__renderBench.shown !== null",
            timeout=60_000,
            polling=50,
        )
        # Settled: no long task for a second (at most 10 s after the message was shown).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            seen = page.evaluate(READ)
            if seen["now"] - max(seen["lastLong"], seen["shown"]) >= 1000:
                break
            time.sleep(0.2)
        return page.evaluate(READ)
    finally:
        page.close()


def run(env: Env, *, quick: bool) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.db import close_old_connections

    loads = int(os.environ.get("PAINT_LOADS", "3" if quick else "5"))
    before_ref = os.environ.get("PAINT_BEFORE", BEFORE)
    user = User.objects.create_user("bench-paint", password=PASSWORD)
    sessions = {label: build_session(user, turns) for label, turns in SIZES.items()}
    close_old_connections()

    from playwright.sync_api import sync_playwright

    results: dict[str, Any] = {"loads": loads, "sizes": list(SIZES), "widths": list(WIDTHS)}
    with tempfile.TemporaryDirectory(prefix="bench-paint-") as tmp:
        before_tree = Path(tmp)
        results["before"] = _tree_of(before_ref, before_tree)
        results["after"] = "working tree"
        servers = {
            "before": _serve(env, "before", before_tree),
            "after": _serve(env, "after", ROOT),
        }
        samples: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
                )
                results["chromium"] = browser.version
                contexts = {}
                for variant, (_proc, port) in servers.items():
                    base = f"http://127.0.0.1:{port}"
                    storage = logged_in(browser, base, user.username)
                    for width, options in WIDTHS.items():
                        for size, (session, head_id, marker) in sessions.items():
                            context = browser.new_context(storage_state=storage, **options)
                            context.add_init_script(PAINT_SCRIPT)
                            target = {
                                "path": f"/sessions/{session.id}/",
                                "id": head_id,
                                "marker": marker,
                            }
                            context.add_init_script(INIT_SCRIPT % {"target": json.dumps(target)})
                            contexts[(variant, width, size)] = (context, f"{base}{target['path']}")
                print(f"bench: paint: {loads} loads of each of {len(contexts)} ...", flush=True)
                for i in range(loads + 1):
                    for key, (context, url) in contexts.items():
                        measured = _load(context, url)
                        if i:  # the first round warms the servers and the browser
                            samples.setdefault(key, []).append(measured)
                browser.close()
        finally:
            for proc, _port in servers.values():
                proc.stop()
    rows = []
    for (variant, width, size), got in samples.items():

        def p50(name: str, got: list[dict[str, Any]] = got) -> float | None:
            values = [g[name] for g in got if g[name] is not None]
            return statistics.median(values) if values else None

        rows.append(
            {
                "variant": variant,
                "width": width,
                "size": size,
                "fcp_ms": p50("fcp"),
                "lcp_ms": p50("lcp"),
                "tbt_ms": p50("tbt"),
                "shown_ms": p50("shown"),
                "long_tasks": p50("long"),
                "html_ms": p50("html"),
                "dom_content_loaded_ms": p50("dcl"),
                "last_load": got[-1]["fetched"],
            }
        )
    results["rows"] = rows
    results["ratios"] = {
        f"{width} px, {size}": {
            name: ratio(
                _cell(rows, "before", width, size, name), _cell(rows, "after", width, size, name)
            )
            for name in ("fcp_ms", "tbt_ms", "shown_ms")
        }
        for width in WIDTHS
        for size in SIZES
    }
    return results


def _cell(rows: list[dict[str, Any]], variant: str, width: str, size: str, name: str) -> float:
    for row in rows:
        if (row["variant"], row["width"], row["size"]) == (variant, width, size):
            return math.nan if row[name] is None else float(row[name])
    return math.nan


def report(r: dict[str, Any]) -> str:
    def f(value: Any) -> str:
        return "n/a" if value is None else f"{value:,.0f}"

    out = [
        f"chat paint figures (Chromium {r.get('chromium', '?')}), before = {r['before'][:10]},"
        f" after = {r['after']}; p50 of {r['loads']} loads (ms; ratio = before / after)",
        "  width  session          variant  FCP    LCP    TBT   last message shown",
    ]
    for width in r["widths"]:
        for size in r["sizes"]:
            for variant in ("before", "after"):
                row = next(
                    (
                        x
                        for x in r["rows"]
                        if (x["variant"], x["width"], x["size"]) == (variant, width, size)
                    ),
                    None,
                )
                if row is None:
                    continue
                out.append(
                    f"  {width:>5}  {size:<15}  {variant:<7}  {f(row['fcp_ms']):>5}  "
                    f"{f(row['lcp_ms']):>5}  {f(row['tbt_ms']):>4}  {f(row['shown_ms']):>6}"
                )
            ratios = r["ratios"][f"{width} px, {size}"]
            out.append(
                "  "
                + " " * 24
                + "ratio    "
                + "  ".join(
                    f"{ratios[k]:.2f}x" if ratios[k] == ratios[k] else "n/a"
                    for k in ("fcp_ms", "tbt_ms", "shown_ms")
                )
                + "  (FCP, TBT, shown)"
            )
    out.append("  target: the 2,000-message session's last message shown <= 500 ms (after)")
    return "\n".join(out)
