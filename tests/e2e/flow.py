"""The flow a user goes through, driven over HTTP and a websocket client."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

TERMINAL = {"completed", "cancelled", "error"}


class Events:
    """A websocket subscriber that collects every event of one session in a thread."""

    def __init__(self, host: str, session_id: str, token: str) -> None:
        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(
            connect(f"ws://{host}/ws/sessions/{session_id}/?token={token}", open_timeout=10)
        )
        first = json.loads(self.ws.recv(timeout=10))
        assert first["type"] == "subscribed", first
        self.events: list[dict] = []
        self.arrived = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for raw in self.ws:
                with self.arrived:
                    self.events.append(json.loads(raw))
                    self.arrived.notify_all()
        except ConnectionClosed:
            pass

    def wait_for(self, accept: Callable[[dict], bool], what: str, timeout: float = 60.0) -> dict:
        """The first event ``accept`` takes, once it has arrived (the reader notifies)."""
        deadline = time.monotonic() + timeout
        with self.arrived:
            while True:
                for ev in self.events:
                    if accept(ev):
                        return ev
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no event of {what}; events: {self.events[-5:]}")
                self.arrived.wait(left)

    def wait_for_run_end(self, run_id: str, timeout: float = 60.0) -> dict:
        def ended(ev: dict) -> bool:
            run = ev.get("run") or {}
            ours = ev["type"] == "run.updated" and run.get("id") == run_id
            return ours and run.get("status") in TERMINAL

        return self.wait_for(ended, f"run {run_id}'s end", timeout)["run"]

    def close(self) -> None:
        self._stack.close()


def text_from_deltas(events: list[dict], part_id: str) -> str:
    text = ""
    for ev in events:
        if ev["type"] == "text-delta" and ev["part_id"] == part_id:
            assert ev["offset"] == len(text), "a delta starts where the last one ended"
            text += ev["text"]
    return text


def run_the_flow(host: str, token: str, outsider_token: str, workspace: Path) -> None:
    http = httpx.Client(
        base_url=f"http://{host}", headers={"Authorization": f"Token {token}"}, timeout=30
    )
    session = http.post("/api/sessions/", json={"title": "e2e"}).json()
    sid = session["id"]
    events = Events(host, sid, token)
    script = (
        "pace 10\nsay hello world from the stack\nwrite notes/a.txt first line\nread notes/a.txt"
    )
    started = http.post(f"/api/sessions/{sid}/runs/", json={"messages": [{"content": script}]})
    assert started.status_code == 202, started.text
    run = events.wait_for_run_end(started.json()["id"])
    assert run["status"] == "completed", run
    # The session's idle comes after the run's end: every event of the run has arrived then.
    events.wait_for(
        lambda ev: ev["type"] == "session.status" and ev.get("status") == "idle",
        "the session idle",
        30,
    )
    got = list(events.events)
    seqs = [e["seq"] for e in got]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), "seq increases per session"
    assert all(e["session_id"] == sid for e in got)
    deltas = [e for e in got if e["type"] == "text-delta"]
    first_part = deltas[0]["part_id"]
    assert text_from_deltas(got, first_part) == "hello world from the stack"
    states = [
        e["part"]["state"]["status"]
        for e in got
        if e["type"] == "message.part.updated" and e["part"].get("tool") == "write"
    ]
    assert states == ["pending", "running", "completed"], states
    types = {e["type"] for e in got}
    assert {"session.status", "message.updated", "session.diff", "run.updated"} <= types
    statuses = [e["status"] for e in got if e["type"] == "session.status"]
    assert statuses[0] == "busy" and statuses[-1] == "idle"
    assert (workspace / sid / "notes/a.txt").read_text() == "first line"
    messages = http.get(f"/api/sessions/{sid}/messages/").json()["results"]
    stored = [p for m in messages for p in m["parts"] if p["id"] == first_part]
    assert stored[0]["text"] == "hello world from the stack"
    assert http.get(f"/api/sessions/{sid}/files/notes/a.txt").text == "first line"

    # Busy: two runs at once → one 202, one 409; with enqueue both complete in order.
    codes: list[int] = []

    def post(body: dict) -> None:
        with httpx.Client(
            base_url=f"http://{host}", headers={"Authorization": f"Token {token}"}, timeout=30
        ) as c:
            codes.append(c.post(f"/api/sessions/{sid}/runs/", json=body).status_code)

    body = {"messages": [{"content": "wait 1"}]}
    threads = [threading.Thread(target=post, args=(body,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [202, 409], codes
    queued = http.post(
        f"/api/sessions/{sid}/runs/",
        json={"messages": [{"content": "say queued"}], "multitask_strategy": "enqueue"},
    )
    assert queued.status_code == 202
    last = events.wait_for_run_end(queued.json()["id"])
    assert last["status"] == "completed"
    runs = http.get(f"/api/sessions/{sid}/runs/").json()
    assert [r["status"] for r in runs] == ["completed", "completed", "completed"]
    assert runs[1]["finished_at"] <= runs[2]["started_at"], "enqueued runs never overlap"

    # The SSE stream endpoint: the run's events, then the run.
    with http.stream(
        "POST", f"/api/sessions/{sid}/runs/stream/", json={"messages": [{"content": "say sse"}]}
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        names = [line[7:] for line in response.iter_lines() if line.startswith("event: ")]
    assert names[-1] == "run" and "text-delta" in names

    # Revert to the first turn through the real stack: files follow, unrevert restores.
    first_user = next(m for m in messages if m["role"] == "user")
    reverted = http.post(f"/api/sessions/{sid}/revert/", json={"message_id": first_user["id"]})
    assert reverted.status_code == 200, reverted.text
    assert reverted.json()["revert"]["message_id"] == first_user["id"]
    assert not (workspace / sid / "notes/a.txt").exists()
    assert http.post(f"/api/sessions/{sid}/unrevert/").json()["revert"] is None
    assert (workspace / sid / "notes/a.txt").read_text() == "first line"

    # Outsiders: 404 over HTTP, 4403 on the websocket.
    other = httpx.Client(
        base_url=f"http://{host}", headers={"Authorization": f"Token {outsider_token}"}
    )
    assert other.get(f"/api/sessions/{sid}/").status_code == 404
    for url in (
        f"ws://{host}/ws/sessions/{sid}/?token={outsider_token}",
        f"ws://{host}/ws/sessions/{sid}/",
    ):
        with connect(url, open_timeout=10) as ws:
            try:
                ws.recv(timeout=10)
                raise AssertionError("a client that may not see the session got an event")
            except ConnectionClosed as closed:
                assert closed.rcvd is not None and closed.rcvd.code == 4403
    events.close()
