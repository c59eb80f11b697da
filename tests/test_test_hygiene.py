"""Tests wait on events, not time (issue 44, item 7): no sleep decides an assertion or orders
two threads or processes. A test that must act once something happened waits for that fact
(an event, a hook on the code, ``wait_until``, ``tests/support/waits.py``), within a timeout.

The sleeps left in tests/ are listed here, each with why it stays: (b) time passing is the
scenario itself (a model that streams slowly, a process stopped for some leases, samples
spread over a window), or (c) the pause between two looks of a wait or a retry. A new sleep
fails here until it is replaced by a wait on what it waits for, or listed with its reason.
A sleep inside a script's text (a shell command, a Python program a sandbox runs) is not the
test's and is not counted."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SLEEPS = {"time", "asyncio"}

# (file under tests/, the line as written, stripped) → why it stays. (b): the scenario;
# (c): polling inside a wait or a retry.
ALLOWED: dict[tuple[str, str], str] = {
    ("conftest.py", "time.sleep(every)"): "(c) wait_until's pause between two looks",
    ("support/waits.py", "await asyncio.sleep(every)"): "(c) until's pause between two looks",
    (
        "support/embedded_server.py",
        "time.sleep(0.2)",
    ): "(c) between two looks for the started server's answer",
    ("support/ssh_server.py", "time.sleep(0.05)"): "(c) between two looks for sshd's banner",
    (
        "support/fake_openai.py",
        "time.sleep(answer.delay)  # scenario: a model that streams slowly",
    ): "(b) a model that streams slowly: the delay is what the test asks of it",
    (
        "test_request_threads.py",
        "await asyncio.sleep(0)  # scenario: an await, but nothing synchronous (no time passes)",
    ): "(b) an application with an await and no synchronous part; no time passes",
    (
        "test_run_host.py",
        "await self.db(time.sleep, 0.15)  # a slow start-up (history, first rows, snapshot)",
    ): "(b) a slow start-up on a database thread, so that starts overlap",
    (
        "test_downloads.py",
        "time.sleep(1.1)  # a clock in the commits would show now",
    ): "(b) git's commit times have one-second steps, and git is another process",
    (
        "test_events.py",
        "await asyncio.sleep(0.06)  # scenario: a pause past the frame between bursts",
    ): "(b) bursts of deltas separated by more than a frame",
    (
        "test_events.py",
        "await asyncio.sleep(0.03)  # scenario: a pause past the frame, deltas in frames",
    ): "(b) deltas spread over several frames",
    (
        "test_waits.py",
        "time.sleep(0.2)  # scenario: samples spread over the waits (held throughout)",
    ): "(b) a fact that must hold throughout the waits, sampled over them",
    ("e2e/stack.py", "time.sleep(0.1)"): "(c) between two looks for a process's port",
    ("e2e/stack.py", "time.sleep(down_seconds)"): "(b) Redis away for the time asked",
    ("e2e/test_waits.py", "time.sleep(0.1)"): "(c) the sampler's period (connections, threads)",
    (
        "e2e/test_ws_revoke.py",
        "time.sleep(4 * INTERVAL)  # several rechecks pass while nothing changes",
    ): "(b) nothing happens for several rechecks, in the server's process",
    (
        "e2e/test_fencing_sigstop.py",
        "time.sleep(left)  # the rest of the SIGSTOP: 3 leases at least",
    ): "(b) a worker stopped for three leases: the time is the scenario",
    ("e2e/test_browser.py", "time.sleep(2.5)"): "(b) a response held back (a slow network)",
    (
        "e2e/test_crash.py",
        "time.sleep(0.3)  # scenario: the kill lands a little way into the run",
    ): "(b) where in the run the worker is killed",
    (
        "e2e/test_db_pool.py",
        "time.sleep(1.2)  # PostgreSQL's statistics are flushed about once a second",
    ): "(b) the server's statistics of other backends, flushed on its own clock",
    (
        "e2e/test_approvals_e2e.py",
        "time.sleep(3)  # past the lease: no sweep takes a waiting run over",
    ): "(b) a lease lapsing in other processes, with no trace to wait on",
    (
        "e2e/test_approvals_e2e.py",
        "time.sleep(3)  # its sweeps pass (another process: no trace to wait on) and leave it be",
    ): "(b) a new worker's sweeps pass, in another process",
    ("e2e/chaos.py", "time.sleep(0.5)"): "(c) a retry of a lost connection; the settle's looks",
    (
        "e2e/chaos.py",
        "time.sleep(1.0)  # as the chat: open it again a second later",
    ): "(b) a client that reconnects a second later, as the chat does",
    ("e2e/chaos.py", "time.sleep(0.5 * (attempt + 1))"): "(c) a retry's backoff",
    ("e2e/chaos.py", "time.sleep(3.0)"): "(c) a failed submit: look again later",
    ("e2e/chaos.py", "time.sleep(1.0)"): "(c) a failed submit: look again later",
    ("e2e/chaos.py", "time.sleep(delay)"): "(b) the submissions' plan in time",
    ("e2e/chaos.py", "time.sleep(1)"): "(c) a retry of the approver's query",
    ("e2e/chaos.py", "time.sleep(0.3)"): "(c) the approver's period",
    ("e2e/chaos.py", "time.sleep(0.2)  # until the hosts beat"): "(c) between two looks",
    (
        "e2e/chaos.py",
        "time.sleep(max(0.01, min(0.5, wake - time.monotonic())))",
    ): "(b) the faults' schedule",
    (
        "e2e/chaos.py",
        "time.sleep(QUIET_SECONDS + 5.0)",
    ): "(b) the clients' quiet period passes (they read again after it)",
}

# How many of each allowed line a file holds (a copy of an allowed line is a new sleep).
COUNTS = {("e2e/chaos.py", "time.sleep(0.5)"): 2}


def sleeps_in(source: str) -> list[int]:
    """The lines of ``source`` that sleep: ``time.sleep`` or ``asyncio.sleep`` named (called
    or handed to something that calls it), or ``sleep`` imported from either."""
    found = []
    for node in ast.walk(ast.parse(source)):
        named = (
            isinstance(node, ast.Attribute)
            and node.attr == "sleep"
            and isinstance(node.value, ast.Name)
            and node.value.id in SLEEPS
        )
        imported = (
            isinstance(node, ast.ImportFrom)
            and node.module in SLEEPS
            and any(alias.name == "sleep" for alias in node.names)
        )
        if named or imported:
            found.append(node.lineno)
    return sorted(found)


def sleeps_of_the_tests() -> Counter:
    found: Counter = Counter()
    for path in sorted(TESTS.rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        for lineno in sleeps_in(source):
            found[(path.relative_to(TESTS).as_posix(), lines[lineno - 1].strip())] += 1
    return found


def test_no_sleep_in_the_tests_but_the_listed_ones():
    found = sleeps_of_the_tests()
    new = [
        f"tests/{path}: {line}"
        for (path, line), count in found.items()
        if (path, line) not in ALLOWED or count > COUNTS.get((path, line), 1)
    ]
    assert not new, (
        "a sleep in the tests: wait for what it waits for (an event, a hook, wait_until,"
        " tests/support/waits.py), or list it in ALLOWED with why time itself is the"
        " scenario:\n" + "\n".join(new)
    )
    gone = [key for key in ALLOWED if key not in found]
    assert not gone, f"listed sleeps no longer in the tests (take them out): {gone}"


def test_the_check_finds_a_sleep_however_it_is_written():
    planted = (
        "import asyncio, time\n"
        "from time import sleep\n"
        "def f():\n"
        "    time.sleep(0.3)\n"
        "    run(time.sleep, 1)\n"
        "    text = 'time.sleep(60)'  # a script's text: not the test's\n"
        "async def g():\n"
        "    await asyncio.sleep(0.2)\n"
    )
    assert sleeps_in(planted) == [2, 4, 5, 8]
