"""The chat in a real browser (issue 17, "long sessions stay fast"): the current renderer
(``static/app.js`` of the working tree, which starts the ``static/chat/`` modules) and the
previous one (``static/app.js`` of commit ``329be6d``, which re-renders the whole message list
on every event), side by side in the same run, against the same server.

Services mode (Daphne, one Celery worker process, PostgreSQL, Redis); Debian's Chromium,
headless, driven by Playwright. Each renderer gets its own browser context, logged in as the
same user; ``page.route("**/static/app.js")`` serves that renderer's body in place of the
file (both bodies are served this way, so neither comes from the browser's cache).

(a) A session of 2,000 messages (1,000 turns, built in the database: user prompts, assistant
    answers of ~300 characters of Markdown-ish text, every fifth with a tool call): from the
    navigation's start (``performance.now()`` 0) to the last message's text in ``#messages``
    (a MutationObserver in an init script notes when ``[data-message-id=<head>] .text`` holds
    the message's last sentence; the time is taken after the next frame: shown). p50 of
    several loads, the renderers interleaved.
(b) In that session, a 50 tok/s stream (the scripted model: ``pace 20`` then ``say w1 … w500``):
    the page's main thread busy share, CDP ``Performance.getMetrics`` TaskDuration delta over
    the Timestamp delta, from the answer's first word shown to its last word shown.
(c) One open chat page (a new session) through 1,000 short turns (``say ok r<i>``, sent over
    the API, each awaited in the page): after CDP ``HeapProfiler.collectGarbage``, the JS heap
    in use and the DOM node count (``Performance.getMetrics`` JSHeapUsedSize, Nodes) at reply
    100 and at the last reply, and their ratio. Both chats take their turns at once. The old
    renderer slows down as the list grows (every event rebuilds it), so it stops at
    ``OLD_REPLIES`` replies or after ``OLD_SECONDS`` seconds (once 50 replies past its first
    sample), whichever comes first, and the new one
    when the whole benchmark has run ``TOTAL_SECONDS`` (the report says where each stopped);
    the growth per reply compares the two whatever their lengths.

DOM relied on (stable across the rewrite): ``#messages``, ``.msg.user``/``.msg.assistant``
with ``data-message-id``, ``.text`` inside a message, ``#status`` (idle/busy).
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import subprocess
import time
from datetime import timedelta
from typing import Any

from .env import ROOT, Env
from .stats import ratio

OLD_COMMIT = "329be6d"
TURNS = 1000  # the big session: 1,000 user + 1,000 assistant messages
STREAM_WORDS = 500
STREAM_PACE_MS = 20  # 50 tok/s
REPLIES = 1000
TOTAL_SECONDS = 540.0  # (c) of the new renderer ends by then: the whole run stays < 10 min
OLD_REPLIES = 300
OLD_SECONDS = 150.0
SAMPLE_EVERY = 100
PASSWORD = "bench-render-password"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
TARGETS = {"load_ms": 500.0, "busy": 0.20, "growth": 1.10}

# Notes when the head message's text is in #messages (and, one frame later, shown).
INIT_SCRIPT = """
(() => {
  const target = %(target)s;
  if (location.pathname !== target.path) return;
  const mark = (window.__renderBench = { found: null, shown: null, messages: 0, inView: null });
  const check = () => {
    const el = document.querySelector(`#messages [data-message-id="${target.id}"] .text`);
    return el && el.textContent.includes(target.marker) ? el : null;
  };
  const observer = new MutationObserver(() => {
    if (mark.found !== null) return;
    const el = check();
    if (!el) return;
    mark.found = performance.now();
    observer.disconnect();
    requestAnimationFrame(() => {
      // After this frame's paint: a task queued from inside the frame runs after it.
      const channel = new MessageChannel();
      channel.port1.onmessage = () => {
        mark.shown = performance.now();
        const box = el.getBoundingClientRect();
        mark.inView = box.bottom > 0 && box.top < innerHeight && box.height > 0;
        mark.messages = document.querySelectorAll("#messages .msg").length;
      };
      channel.port2.postMessage(0);
    });
  });
  observer.observe(document, { childList: true, subtree: true, characterData: true });
})();
"""

LAST_ASSISTANT = """() => {
  const all = document.querySelectorAll('#messages .msg.assistant');
  const last = all[all.length - 1];
  if (!last) return null;
  const t = last.querySelector('.text');
  return { id: last.dataset.messageId || null, text: t ? t.textContent.trim() : '' };
}"""

# -- the big session, in the database --------------------------------------------------------
TOPICS = (
    "cache invalidation",
    "retry policy",
    "config loader",
    "CSV importer",
    "auth middleware",
    "rate limiter",
    "search index",
    "billing export",
)


def _answer(turn: int) -> str:
    """~300 characters of what a coding agent writes: paragraphs, a list, inline code, now
    and then a fenced block; it ends with a sentence unique to the turn."""
    topic = TOPICS[turn % len(TOPICS)]
    module = f"src/{topic.split()[0].lower()}_{turn % 37}.py"
    text = (
        f"I read `{module}` and the **{topic}** looks mostly right, with two problems:\n\n"
        f"- the guard on line {40 + turn % 60} skips empty input, so `parse()` returns `None`;\n"
        f"- a failed write leaves the entry marked *fresh* for {turn % 9 + 1} minutes.\n\n"
    )
    if turn % 7 == 0:
        text += f"```python\ndef check_{turn}(value):\n    return value is not None\n```\n\n"
    text += f"I fixed both and added a test for each. Done with turn {turn}."
    return text


def build_session(user: Any, turns: int) -> tuple[Any, str, str]:
    """A session of ``turns`` completed runs (a user prompt, an answer), bulk-inserted with a
    valid tree (parent links, the head on the last answer) and the runs' rows, as a session
    that was really used has them (the chat shows their checkpoints and usage). Returns it,
    the head's id and the head's last sentence."""
    from django.utils import timezone

    from core import ids
    from runs_app.models import Run
    from runs_app.models import run_id as new_run_id
    from sessions_app.models import Message, Part, Session
    from sessions_app.services.sessions import create_session

    session = create_session(owner=user, title=f"render {turns * 2} messages")
    base = timezone.now() - timedelta(days=2)
    messages, parts, runs = [], [], []
    parent = None
    snap = {"snapshot": "0" * 40, "step": 0}
    for turn in range(turns):
        rid = new_run_id()
        topic = TOPICS[turn % len(TOPICS)]
        prompt = f"Please look at the {topic} (turn {turn}) and fix what is wrong."
        at = base + timedelta(seconds=2 * turn)
        user_id, answer_id = ids.message_id(), ids.message_id()
        messages.append(
            Message(
                id=user_id,
                session_id=session.id,
                run_id=rid,
                parent_id=parent,
                role=Message.Role.USER,
                created_at=at,
                completed_at=at,
            )
        )
        messages.append(
            Message(
                id=answer_id,
                session_id=session.id,
                run_id=rid,
                parent_id=user_id,
                role=Message.Role.ASSISTANT,
                created_at=at,
                completed_at=at + timedelta(seconds=1),
                model="scripted",
                tokens={"input_tokens": 900 + 40 * turn, "output_tokens": 70},
            )
        )
        parent = answer_id
        runs.append(
            Run(
                id=rid,
                session_id=session.id,
                status=Run.Status.COMPLETED,
                result="stop",
                input=[{"role": "user", "content": prompt}],
                input_message_id=user_id,
                model="scripted",
                created_by=user,
                started_at=at,
                finished_at=at + timedelta(seconds=1),
                usage={"input_tokens": 900 + 40 * turn, "output_tokens": 70},
            )
        )
        parts.append(
            Part(message_id=user_id, session_id=session.id, order=0, type="text", text=prompt)
        )
        common = {"message_id": answer_id, "session_id": session.id}
        parts.append(Part(**common, order=0, type="step-start", data=snap))
        parts.append(Part(**common, order=1, type="text", text=_answer(turn)))
        if turn % 5 == 0:
            parts.append(
                Part(
                    **common,
                    order=2,
                    type="tool",
                    call_id=f"call_render_{turn}",
                    tool="read",
                    state={
                        "status": "completed",
                        "input": {"path": f"src/module_{turn % 37}.py"},
                        "output": "def parse(value):\n    return value\n" * 3,
                        "error": None,
                        "metadata": {},
                        "time": {"start": 0, "end": 0},
                    },
                )
            )
        parts.append(Part(**common, order=3, type="step-finish", data=snap))
    Message.objects.bulk_create(messages, batch_size=1000)
    Part.objects.bulk_create(parts, batch_size=1000)
    Run.objects.bulk_create(runs, batch_size=1000)
    Session.objects.filter(id=session.id).update(head_id=parent)
    session.refresh_from_db()
    return session, parent, f"Done with turn {turns - 1}."


# -- the browser side -------------------------------------------------------------------------
class Variant:
    """One renderer: its app.js body, its own logged-in browser context."""

    def __init__(self, name: str, label: str, body: str) -> None:
        self.name, self.label, self.body = name, label, body
        self.sha = hashlib.sha1(body.encode()).hexdigest()[:10]
        self.context: Any = None
        self.results: dict[str, Any] = {}
        self.errors: list[str] = []  # uncaught errors of its pages
        self.failed: str | None = None  # the first measure it could not finish, and why

    def fail(self, stage: str, exc: BaseException) -> None:
        """This renderer could not finish a measure: note it, go on with the other one."""
        why = f"{stage}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if self.errors:
            why += f" (page error: {self.errors[0][:200]})"
        self.failed = self.failed or why
        print(f"bench: render: the {self.name} renderer failed {why}", flush=True)

    def open(self, browser: Any, storage: dict[str, Any], init_script: str) -> None:
        self.context = browser.new_context(
            viewport={"width": 1280, "height": 900}, storage_state=storage
        )
        self.context.set_default_timeout(60_000)
        self.context.add_init_script(init_script)
        body = self.body
        self.context.route(
            "**/static/app.js",
            lambda route: route.fulfill(
                status=200,
                body=body,
                headers={"Content-Type": "text/javascript; charset=utf-8"},
            ),
        )

    def page(self) -> Any:
        page = self.context.new_page()
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        return page


def _metrics(cdp: Any) -> dict[str, float]:
    return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}


def _gc_metrics(cdp: Any) -> dict[str, float]:
    """Metrics after full collections, with a pause between them for Blink's sweeping (the
    node counter drops only when a dead node is swept)."""
    for pause in (0.0, 0.3, 0.0):
        time.sleep(pause)
        cdp.send("HeapProfiler.collectGarbage")
    return _metrics(cdp)


class Api:
    """The run API over HTTP (token auth), outside the browser."""

    def __init__(self, base: str, token: str) -> None:
        import httpx

        self.http = httpx.Client(
            base_url=base, headers={"Authorization": f"Token {token}"}, timeout=60
        )

    def send(self, session_id: str, text: str, timeout: float = 60.0) -> None:
        """Start a run; while the session still finishes the previous one (409), try again."""
        deadline = time.monotonic() + timeout
        body = {"messages": [{"role": "user", "content": text}]}
        while True:
            r = self.http.post(f"/api/sessions/{session_id}/runs/", json=body)
            if r.status_code in (200, 201, 202):
                return
            if r.status_code != 409 or time.monotonic() > deadline:
                raise RuntimeError(f"POST runs: HTTP {r.status_code} {r.text[:300]}")
            time.sleep(0.02)

    def wait_idle(self, session_id: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.http.get(f"/api/sessions/{session_id}/").json()["status"] == "idle":
                return
            time.sleep(0.1)
        raise RuntimeError(f"session {session_id} did not become idle in {timeout}s")

    def close(self) -> None:
        self.http.close()


def logged_in(browser: Any, base: str, username: str) -> dict[str, Any]:
    """The storage state (the session cookie) of ``username`` logged in through the page."""
    login = browser.new_context()
    page = login.new_page()
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
    storage = login.storage_state()
    login.close()
    return storage


def _open_chat(variant: Variant, base: str, session_id: str) -> Any:
    page = variant.page()
    page.goto(f"{base}/sessions/{session_id}/", wait_until="commit")
    page.wait_for_selector("#messages")
    page.wait_for_function("() => document.getElementById('status')?.textContent.trim() === 'idle'")
    return page


def _settle(page: Any, at_least: int = 1, quiet_s: float = 1.5, cap_s: float = 90.0) -> int:
    """Wait until #messages shows ``at_least`` messages and their number stops changing (a
    renderer may load older pages by itself)."""
    deadline = time.monotonic() + cap_s
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        n = page.evaluate("() => document.querySelectorAll('#messages .msg').length")
        if n != last:
            last, since = n, time.monotonic()
        elif n >= at_least and time.monotonic() - since >= quiet_s:
            break
        time.sleep(0.25)
    return last


def measure_loads(variants: list[Variant], base: str, session_id: str, loads: int) -> None:
    """(a) navigation start → the head message's text shown, ``loads`` times each, the
    renderers interleaved, after one unmeasured load each."""
    samples: dict[str, list[dict[str, Any]]] = {v.name: [] for v in variants}
    for i in range(loads + 1):
        for v in variants:
            if v.failed:
                continue
            page = v.page()
            try:
                mark = _load_once(page, f"{base}/sessions/{session_id}/")
            except Exception as exc:  # noqa: BLE001 - noted, the other renderer goes on
                v.fail("(a)", exc)
                continue
            finally:
                page.close()
            if i:  # the first round warms up the server and the browser
                samples[v.name].append(mark)
    for v in variants:
        if not samples[v.name]:
            continue
        ms = [s["shown"] for s in samples[v.name]]
        v.results["load"] = {
            "p50_ms": statistics.median(ms),
            "min_ms": min(ms),
            "max_ms": max(ms),
            "samples_ms": ms,
            "found_p50_ms": statistics.median(s["found"] for s in samples[v.name]),
            "html_response_end_p50_ms": statistics.median(
                s["responseEnd"] or 0 for s in samples[v.name]
            ),
            "messages_in_dom": statistics.median(s["messages"] for s in samples[v.name]),
            "in_view_share": sum(bool(s["inView"]) for s in samples[v.name]) / len(ms),
            "api_before_shown": _api_breakdown(samples[v.name]),
        }
        print(f"bench: render (a) {v.name}: {_brief_load(v.results['load'])}", flush=True)


def _load_once(page: Any, url: str) -> dict[str, Any]:
    page.goto(url, wait_until="commit")
    page.wait_for_function(
        "() => window.__renderBench && window.__renderBench.shown !== null",
        timeout=60_000,
        polling=50,
    )
    return page.evaluate(
        """() => {
          const mark = window.__renderBench;
          const nav = performance.getEntriesByType('navigation')[0] || {};
          // The API answers the page had before the message was shown.
          const api = performance.getEntriesByType('resource')
            .filter((e) => e.name.includes('/api/') && e.responseEnd <= mark.found)
            .map((e) => ({
              path: new URL(e.name).pathname.replace(/ses_[0-9a-z]+/, '{id}'),
              start: e.startTime, end: e.responseEnd,
            }));
          return { ...mark, responseEnd: nav.responseEnd,
                   domContentLoaded: nav.domContentLoadedEventEnd, api };
        }"""
    )


def _api_breakdown(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per API path asked before the message was shown: p50 of its start and its end (ms
    after navigation start), in the order of the ends."""
    by_path: dict[str, list[dict[str, float]]] = {}
    for s in samples:
        for e in s["api"]:
            by_path.setdefault(e["path"], []).append(e)
    rows = [
        {
            "path": path,
            "start_p50_ms": statistics.median(e["start"] for e in entries),
            "end_p50_ms": statistics.median(e["end"] for e in entries),
            "count": len(entries),
        }
        for path, entries in by_path.items()
    ]
    return sorted(rows, key=lambda r: r["end_p50_ms"])


def measure_stream(v: Variant, api: Api, base: str, session_id: str) -> None:
    """(b) the main thread's busy share while a 50 tok/s answer streams into the session."""
    page = _open_chat(v, base, session_id)
    try:
        _stream(v, api, page, session_id)
    finally:
        page.close()
    api.wait_idle(session_id)


def _stream(v: Variant, api: Api, page: Any, session_id: str) -> None:
    shown = _settle(page)
    page.evaluate("() => { const s = document.scrollingElement; s.scrollTop = s.scrollHeight; }")
    page.wait_for_timeout(1000)
    before = page.evaluate(LAST_ASSISTANT)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable", {"timeDomain": "timeTicks"})
    words = [f"w{i}" for i in range(1, STREAM_WORDS + 1)]
    api.send(session_id, f"pace {STREAM_PACE_MS}\nsay " + " ".join(words))
    sent = time.monotonic()
    page.wait_for_function(
        f"""(prev) => {{
          const last = ({LAST_ASSISTANT})();
          return last && last.id !== prev && last.text.startsWith('w1');
        }}""",
        arg=before and before["id"],
        polling=50,
        timeout=120_000,
    )
    m0 = _metrics(cdp)
    first_word_s = time.monotonic() - sent
    page.wait_for_function(
        f"""(end) => {{
          const last = ({LAST_ASSISTANT})();
          return last && last.text.endsWith(end);
        }}""",
        arg=words[-1],
        polling=50,
        timeout=300_000,
    )
    m1 = _metrics(cdp)
    wall = m1["Timestamp"] - m0["Timestamp"]
    d = {k: m1.get(k, 0.0) - m0.get(k, 0.0) for k in m1}
    v.results["stream"] = {
        "busy_share": d["TaskDuration"] / wall,
        "script_share": d.get("ScriptDuration", 0.0) / wall,
        "layout_share": (d.get("LayoutDuration", 0.0) + d.get("RecalcStyleDuration", 0.0)) / wall,
        "window_s": wall,
        "stream_s_expected": (STREAM_WORDS - 1) * STREAM_PACE_MS / 1000.0,
        "task_ms_per_word": d["TaskDuration"] * 1000.0 / STREAM_WORDS,
        "first_word_s": first_word_s,
        "messages_in_dom": shown,
    }
    print(f"bench: render (b) {v.name}: {_brief_stream(v.results['stream'])}", flush=True)
    cdp.detach()


DOC_NODES = """() => {
  let n = 0;
  const walk = document.createTreeWalker(document, NodeFilter.SHOW_ALL);
  while (walk.nextNode()) n++;
  return n;
}"""


class Chat:
    """(c) for one renderer: its open page on its own session, its samples."""

    def __init__(self, v: Variant, api: Api, base: str, session_id: str, replies: int) -> None:
        self.v, self.api, self.session_id, self.replies = v, api, session_id, replies
        self.page = _open_chat(v, base, session_id)
        self.cdp = self.page.context.new_cdp_session(self.page)
        self.cdp.send("Performance.enable", {"timeDomain": "timeTicks"})
        self.samples: list[dict[str, Any]] = []
        self.done = 0
        self.stopped_early = False
        self.seconds = 0.0

    def sample(self, started: float) -> None:
        """After the run and the page have settled: GC, then heap and node counts."""
        self.api.wait_idle(self.session_id)
        self.page.wait_for_timeout(300)  # what a finished run still asks for (the tree)
        m = _gc_metrics(self.cdp)
        s = {
            "reply": self.done,
            "seconds": time.monotonic() - started,
            "heap_bytes": m["JSHeapUsedSize"],
            "nodes": m["Nodes"],
            "document_nodes": self.page.evaluate(DOC_NODES),
            "listeners": m.get("JSEventListeners", math.nan),
            "messages_in_dom": self.page.evaluate(
                "() => document.querySelectorAll('#messages .msg').length"
            ),
        }
        self.samples.append(s)
        print(
            f"bench: render (c) {self.v.name}: reply {s['reply']}: heap "
            f"{s['heap_bytes'] / 2**20:.1f} MiB, {s['nodes']:.0f} nodes "
            f"({s['document_nodes']} in the document), {s['messages_in_dom']} messages shown, "
            f"{s['seconds']:.0f} s",
            flush=True,
        )

    def finish(self, started: float) -> None:
        if self.done and (not self.samples or self.samples[-1]["reply"] != self.done):
            try:
                self.sample(started)
            except Exception as exc:  # noqa: BLE001 - a broken page: keep what was sampled
                self.v.fail(f"(c) sampling at reply {self.done}", exc)
        self.seconds = time.monotonic() - started
        self.api.wait_idle(self.session_id)
        self.page.close()
        if not self.samples:
            return
        early, late = self.samples[0], self.samples[-1]
        per = max(1, late["reply"] - early["reply"])
        self.v.results["memory"] = {
            "replies": self.done,
            "asked_replies": self.replies,
            "stopped_early": self.stopped_early,
            "seconds": self.seconds,
            "early": early,
            "late": late,
            "heap_ratio": ratio(late["heap_bytes"], early["heap_bytes"]),
            "nodes_ratio": ratio(late["nodes"], early["nodes"]),
            "document_nodes_ratio": ratio(late["document_nodes"], early["document_nodes"]),
            "heap_kib_per_reply": (late["heap_bytes"] - early["heap_bytes"]) / 1024 / per,
            "nodes_per_reply": (late["nodes"] - early["nodes"]) / per,
            # The slope over the later half only: once a renderer's window (if any) is full.
            "second_half": _slope(self.samples),
            "samples": self.samples,
        }


def _slope(samples: list[dict[str, Any]]) -> dict[str, float]:
    """Growth per reply from the sample nearest half the last reply to the last sample."""
    late = samples[-1]
    mid = min(samples[:-1] or samples, key=lambda s: abs(s["reply"] - late["reply"] / 2))
    per = late["reply"] - mid["reply"]
    if per <= 0:
        return {"from_reply": mid["reply"], "heap_kib_per_reply": math.nan}
    return {
        "from_reply": mid["reply"],
        "heap_kib_per_reply": (late["heap_bytes"] - mid["heap_bytes"]) / 1024 / per,
        "nodes_per_reply": (late["nodes"] - mid["nodes"]) / per,
        "document_nodes_per_reply": (late["document_nodes"] - mid["document_nodes"]) / per,
    }


def measure_memory(chats: list[Chat], caps: dict[str, tuple[float, int]]) -> None:
    """(c) short turns into every open chat at once (one run per session at a time, the
    renderers side by side), each answer awaited in its page; heap and nodes after a forced
    GC every SAMPLE_EVERY replies and at the last. A chat stops at its reply count, or once
    past its time cap ``caps[name][0]`` and at least ``caps[name][1]`` replies after its first
    sample."""
    started = time.monotonic()
    active = list(chats)
    i = 0
    while active:
        i += 1
        answer = f"ok r{i}"
        for c in active:
            c.api.send(c.session_id, f"say {answer}")
        for c in list(active):
            try:
                c.page.wait_for_function(
                    f"(want) => ({LAST_ASSISTANT})()?.text === want", arg=answer, timeout=60_000
                )
            except Exception as exc:  # noqa: BLE001 - noted, the other renderer goes on
                c.v.fail(f"(c) at reply {i}", exc)
                c.stopped_early = True
                c.finish(started)
                active.remove(c)
                continue
            c.done = i
        for c in list(active):
            if i % SAMPLE_EVERY == 0:
                c.sample(started)
            # Past its time: stop here (``finish`` takes the last sample).
            cap, span = caps[c.v.name]
            over = time.monotonic() - started > cap
            if i < c.replies and over and c.samples and i - c.samples[0]["reply"] >= span:
                c.stopped_early = True
            if i >= c.replies or c.stopped_early:
                c.finish(started)
                active.remove(c)


def _brief_load(r: dict[str, Any]) -> str:
    return (
        f"p50 {r['p50_ms']:.0f} ms (min {r['min_ms']:.0f}, max {r['max_ms']:.0f}; in the DOM at "
        f"{r['found_p50_ms']:.0f} ms), {r['messages_in_dom']:.0f} messages in the DOM, "
        f"in view {100 * r['in_view_share']:.0f}% of loads; HTML at "
        f"{r['html_response_end_p50_ms']:.0f} ms; API answers before it: "
        + ", ".join(f"{a['path']} {a['end_p50_ms']:.0f}" for a in r["api_before_shown"])
    )


def _brief_stream(r: dict[str, Any]) -> str:
    return (
        f"main thread busy {100 * r['busy_share']:.1f}% over {r['window_s']:.1f} s "
        f"(stream {r['stream_s_expected']:.1f} s; script {100 * r['script_share']:.1f}%, "
        f"style+layout {100 * r['layout_share']:.1f}%), {r['task_ms_per_word']:.2f} ms/word, "
        f"{r['messages_in_dom']} messages in the DOM"
    )


# -- the whole benchmark ----------------------------------------------------------------------
def _old_body() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{OLD_COMMIT}:static/app.js"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def run(env: Env, *, quick: bool) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.db import close_old_connections
    from playwright.sync_api import sync_playwright
    from rest_framework.authtoken.models import Token

    from sessions_app.services.sessions import create_session

    loads = 3 if quick else 7
    replies = 200 if quick else REPLIES
    old_replies = min(replies, OLD_REPLIES)
    total_seconds = 240.0 if quick else TOTAL_SECONDS
    old_seconds = 60.0 if quick else OLD_SECONDS

    # Everything in the database first (the ORM is not used once the browser runs).
    t0 = time.monotonic()
    user = User.objects.create_user("bench-render", password=PASSWORD)
    token = Token.objects.create(user=user).key
    big, head_id, marker = build_session(user, TURNS)
    sessions = {n: create_session(owner=user, title=f"render chat {n}") for n in ("new", "old")}
    close_old_connections()
    build_s = time.monotonic() - t0
    print(f"bench: render: built a {2 * TURNS}-message session in {build_s:.1f} s", flush=True)

    new_body = (ROOT / "static" / "app.js").read_text()
    variants = [
        Variant("new", "static/app.js (working tree)", new_body),
        Variant("old", f"static/app.js of {OLD_COMMIT}", _old_body()),
    ]
    for v in variants:
        v.results.update(app_js_sha1=v.sha, app_js_bytes=len(v.body))

    daphne, port = env.daphne()
    # A window the 2,000 messages fit in: no compaction run in the middle of the measures.
    worker = env.worker(4, pool="threads", SCRIPTED_CONTEXT_WINDOW="100000000")
    base = f"http://127.0.0.1:{port}"
    api = Api(base, token)
    init = INIT_SCRIPT % {
        "target": json.dumps({"path": f"/sessions/{big.id}/", "id": head_id, "marker": marker})
    }
    results: dict[str, Any] = {
        "turns": TURNS,
        "messages": 2 * TURNS,
        "build_seconds": build_s,
        "old_commit": OLD_COMMIT,
        "stream": {"words": STREAM_WORDS, "pace_ms": STREAM_PACE_MS},
        "replies": replies,
        "caps": {
            "old_replies": old_replies,
            "old_seconds": old_seconds,
            "total_seconds": total_seconds,
        },
        "targets": TARGETS,
    }
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
            )
            try:
                results["chromium"] = browser.version
                storage = logged_in(browser, base, user.username)
                for v in variants:
                    v.open(browser, storage, init)
                print(f"bench: render (a): {loads} loads each ...", flush=True)
                measure_loads(variants, base, big.id, loads)
                for v in variants:
                    if v.failed:
                        continue
                    print(f"bench: render (b) {v.name}: streaming ...", flush=True)
                    try:
                        measure_stream(v, api, base, big.id)
                    except Exception as exc:  # noqa: BLE001 - noted, the other one goes on
                        v.fail("(b)", exc)
                        api.wait_idle(big.id)
                counts = {"new": replies, "old": old_replies}
                # What is left of the budget, less the teardown's margin.
                new_seconds = max(60.0, total_seconds - (time.monotonic() - t0) - 30.0)
                results["caps"]["new_seconds"] = new_seconds
                print(
                    f"bench: render (c): {replies} replies or {new_seconds:.0f} s (old renderer: "
                    f"{old_replies} or {old_seconds:.0f} s), both chats at once ...",
                    flush=True,
                )
                chats = []
                for v in variants:
                    if v.failed:
                        continue
                    try:
                        chats.append(Chat(v, api, base, sessions[v.name].id, counts[v.name]))
                    except Exception as exc:  # noqa: BLE001 - noted, the other one goes on
                        v.fail("(c) opening the chat", exc)
                # The old one may run past its cap (beside the new one) for a span worth
                # measuring; the new one stops at the budget.
                measure_memory(
                    chats, {"new": (new_seconds, 1), "old": (old_seconds, SAMPLE_EVERY // 2)}
                )
                for v in variants:
                    v.context.close()
            finally:
                browser.close()
    finally:
        api.close()
        worker.stop()
        daphne.stop()
    for v in variants:
        results[v.name] = {
            "label": v.label,
            **v.results,
            "failed": v.failed,
            "page_errors": v.errors[:20],
        }
    new, old = results["new"], results["old"]
    results["ratios"] = {
        key: ratio(_at(old, *path), _at(new, *path))
        for key, path in (
            ("load_p50", ("load", "p50_ms")),
            ("stream_busy", ("stream", "busy_share")),
            ("heap_per_reply", ("memory", "heap_kib_per_reply")),
            ("nodes_per_reply", ("memory", "nodes_per_reply")),
        )
    }
    return results


def _at(d: Any, *keys: str) -> Any:
    """``d[k1][k2]…``, NaN where a measure is missing (a renderer that failed)."""
    for key in keys:
        if not isinstance(d, dict) or key not in d:
            return math.nan
        d = d[key]
    return d


def _times(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.2f}x"


def _met(value: float, ok: Any) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return "met" if ok(value) else "NOT met"


def report(r: dict[str, Any]) -> str:
    from .__main__ import _f, _table

    new, old = r["new"], r["old"]
    t = r["targets"]

    def both(*path: str) -> tuple[Any, Any]:
        return _at(new, *path), _at(old, *path)

    def row(
        label: str, path: tuple[str, ...], digits: int, target: str, ok: Any, scale: float = 1
    ) -> list[str]:
        a, b = (v * scale for v in both(*path))
        return [
            label,
            _f(a, digits),
            _f(b, digits),
            _times(ratio(b, a) if a > 0 and b > 0 else math.nan),
            target,
            _met(a, ok) if ok else "",
            _met(b, ok) if ok else "",
        ]

    def flat(v: float) -> bool:
        return v <= t["growth"]

    new_last, old_last = both("memory", "late", "reply")
    first = _at(new, "memory", "early", "reply")
    late_label = f"reply {_f(new_last, 0)}" + (
        f" (old: {_f(old_last, 0)})" if old_last != new_last else ""
    )
    growth = f"<= {t['growth']:.2f}x"
    rows = [
        row(
            f"(a) {r['messages']:,}-message session: navigation -> last message shown, p50 ms",
            ("load", "p50_ms"),
            0,
            f"< {t['load_ms']:.0f} ms",
            lambda v: v < t["load_ms"],
        ),
        row(
            f"(b) {1000 / r['stream']['pace_ms']:.0f} tok/s stream in it: main thread busy %",
            ("stream", "busy_share"),
            1,
            f"< {100 * t['busy']:.0f}%",
            lambda v: v < 100 * t["busy"],
            scale=100,
        ),
        row(
            f"(c) JS heap after GC, {late_label} / reply {_f(first, 0)}",
            ("memory", "heap_ratio"),
            2,
            growth,
            flat,
        ),
        row("(c) DOM nodes (CDP Nodes), same replies", ("memory", "nodes_ratio"), 2, growth, flat),
        row(
            "(c) nodes in the document, same replies",
            ("memory", "document_nodes_ratio"),
            2,
            "",
            None,
        ),
        row("(c) JS heap growth, KiB per reply", ("memory", "heap_kib_per_reply"), 2, "", None),
        row("(c) DOM nodes added per reply", ("memory", "nodes_per_reply"), 1, "", None),
        row(
            "(c) later half only: JS heap KiB per reply",
            ("memory", "second_half", "heap_kib_per_reply"),
            2,
            "",
            None,
        ),
        row(
            "(c) later half only: nodes in the document per reply",
            ("memory", "second_half", "document_nodes_per_reply"),
            1,
            "",
            None,
        ),
    ]

    def pair(*path: str, digits: int = 0, scale: float = 1) -> str:
        a, b = both(*path)
        return f"{_f(a * scale, digits)} / {_f(b * scale, digits)}"

    def slowest(v: dict[str, Any]) -> str:
        api = _at(v, "load", "api_before_shown")
        if not isinstance(api, list) or not api:
            return "-"
        return f"{api[-1]['path']} at {_f(api[-1]['end_p50_ms'], 0)} ms"

    capped = "".join(
        f"; {name} stopped at reply {_f(_at(v, 'memory', 'replies'), 0)} of {r['replies']:,} "
        f"({'time cap' if _at(v, 'memory', 'stopped_early') is True else 'reply cap'}, "
        f"{_f(_at(v, 'memory', 'seconds'), 0)} s)"
        for name, v in (("new", new), ("old", old))
        if _at(v, "memory", "replies") < r["replies"]  # NaN (no measure) compares False
    )
    notes = [
        f"new = {new['label']} (sha1 {new['app_js_sha1']}), old = {old['label']} "
        f"(sha1 {old['app_js_sha1']}); Chromium {r.get('chromium', '?')}, headless; "
        "figures new / old",
        f"(a) {len(_at(new, 'load', 'samples_ms') or [])} loads each, interleaved; in the DOM "
        f"at p50 {pair('load', 'found_p50_ms')} ms; HTML at "
        f"{pair('load', 'html_response_end_p50_ms')} ms; last API answer before it: "
        f"{slowest(new)} / {slowest(old)}; messages in the DOM {pair('load', 'messages_in_dom')}; "
        f"in view in {pair('load', 'in_view_share', scale=100)}% of loads",
        f"(b) first word -> last word shown {pair('stream', 'window_s', digits=1)} s (the stream "
        f"lasts {_f((r['stream']['words'] - 1) * r['stream']['pace_ms'] / 1000)} s); "
        f"main-thread ms per word {pair('stream', 'task_ms_per_word', digits=2)}; messages in "
        f"the DOM {pair('stream', 'messages_in_dom')}",
        f"(c) both chats at once, each in a new session; at the last reply: messages in the DOM "
        f"{pair('memory', 'late', 'messages_in_dom')}, JS heap "
        f"{pair('memory', 'late', 'heap_bytes', digits=1, scale=1 / 2**20)} MiB, nodes "
        f"{pair('memory', 'late', 'nodes')} ({pair('memory', 'late', 'document_nodes')} in the "
        f"document; the rest: detached, still referenced after GC); later half from reply "
        f"{pair('memory', 'second_half', 'from_reply')}{capped}",
    ]
    notes += [
        f"{name} renderer FAILED {v['failed']}"
        for name, v in (("new", new), ("old", old))
        if v.get("failed")
    ]
    return _table(
        "Chat rendering in Chromium (services mode; new = current app.js, old = the "
        "whole-list re-render)",
        ["", "new", "old", "old / new", "target", "new", "old"],
        rows,
        "\n  ".join(notes),
    )
