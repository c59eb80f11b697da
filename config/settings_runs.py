"""Settings of the runs (docs/configuration.md, "Runs and streaming", and the run host's of
"Mode and services"): the busy lock's lease, the stream's frames and writes, the run host's
capacity, the requests that wait for their run, the time limit. Imported whole by
config/settings.py (which keeps ``RUN_EXECUTOR``: the mode is decided there)."""

from __future__ import annotations

import os
import socket

AGENT_MAX_STEPS = int(os.environ.get("AGENT_MAX_STEPS", "25"))
# Lease of the per-session busy lock; the running loop renews it every third of this.
RUN_LEASE_SECONDS = float(os.environ.get("RUN_LEASE_SECONDS", "30"))
# The name of this process's worker host (sessions_app/hosts.py): its sessions' runs and
# clones go to its Celery queue; a host is live while it beat within the lease.
WORKER_HOST = os.environ.get("WORKER_HOST") or socket.gethostname()
# Replicated snapshots (workspace/replication.py): after each step and history move, the
# session's snapshot is pushed to this central bare repository (https or ssh; empty: off).
SNAPSHOT_REMOTE = os.environ.get("SNAPSHOT_REMOTE", "")
SNAPSHOT_REMOTE_TOKEN = os.environ.get("SNAPSHOT_REMOTE_TOKEN", "")
SNAPSHOT_REMOTE_SSH_KEY = os.environ.get("SNAPSHOT_REMOTE_SSH_KEY", "")
SNAPSHOT_REMOTE_KNOWN_HOSTS = os.environ.get("SNAPSHOT_REMOTE_KNOWN_HOSTS", "")
SNAPSHOT_REMOTE_TIMEOUT = float(os.environ.get("SNAPSHOT_REMOTE_TIMEOUT", "30"))
# How long a web process that holds no worktree waits for the home host's answer to a history
# move or an upload's materialisation (sessions_app/host_calls.py).
HOST_CALL_TIMEOUT = float(os.environ.get("HOST_CALL_TIMEOUT", "30"))
# A run whose lease was not known renewed for this fraction of a lease stops (before the
# lease can lapse and the sweep give the run to another worker).
RUN_LEASE_STOP_FRACTION = float(os.environ.get("RUN_LEASE_STOP_FRACTION", "0.75"))
# Executions of a run in a row that ended without the run ending (its worker crashed or died,
# the lease expired): past this many, the next delivery ends the run in error instead of
# starting it again, so no input makes a run loop between crash and re-enqueue.
RUN_MAX_ATTEMPTS = int(os.environ.get("RUN_MAX_ATTEMPTS", "3"))
# Aborts arrive at once (Redis pub/sub / in-process); the database flag is re-read this often.
RUN_ABORT_POLL_SECONDS = float(os.environ.get("RUN_ABORT_POLL_SECONDS", "1.0"))
# Text deltas of one session are coalesced into frames of at most this many milliseconds,
# while at most STREAM_FRAME_SESSIONS sessions stream from one process; beyond, frames widen
# in proportion (fewer, fuller frames for hundreds of streams), up to STREAM_FRAME_MAX_MS.
STREAM_FRAME_MS = float(os.environ.get("STREAM_FRAME_MS", "25"))
STREAM_FRAME_SESSIONS = float(os.environ.get("STREAM_FRAME_SESSIONS", "50"))
STREAM_FRAME_MAX_MS = float(os.environ.get("STREAM_FRAME_MAX_MS", "150"))
# Streamed text is written to the database at most this often while a step streams.
STREAM_FLUSH_SECONDS = float(os.environ.get("STREAM_FLUSH_SECONDS", "0.5"))
# At most this many parts' streamed text a write (the others at the next tick).
STREAM_FLUSH_BATCH = int(os.environ.get("STREAM_FLUSH_BATCH", "100"))
# The run host (runs_app/execution/host.py): every live run of a process is a coroutine on one loop.
# At most RUN_HOST_CAPACITY live runs a process (more wait for room; the broker hands them to
# other workers); RUN_DB_THREADS threads (one database connection each) run their database
# statements and git, RUN_TOOL_THREADS their file tools.
RUN_HOST_CAPACITY = int(os.environ.get("RUN_HOST_CAPACITY", "1000"))
RUN_DB_THREADS = int(os.environ.get("RUN_DB_THREADS", "8"))
RUN_TOOL_THREADS = int(os.environ.get("RUN_TOOL_THREADS", "16"))
# How many runs of a host may be starting at once (begin, the history, the first rows, a
# snapshot): the rest wait their turn, so a burst of new runs leaves the live ones room
# (docs/benchmarks.md, streaming: 4 at once let 500 starting runs hold up the live ones' tokens
# when a start cost twice what it does now; 3 since starts got cheaper: the first token of 50
# runs asked for at once came 0.1-0.2 s sooner at p99, the tokens' p99 within its spread).
RUN_STARTING_AT_ONCE = int(os.environ.get("RUN_STARTING_AT_ONCE", "3"))
# Requests that wait for their run (``wait: true``; runs_app/waits.py) hold no thread and no
# database connection while they wait: at most RUN_WAITS_PER_USER_MAX of them per user at
# once, across the web processes (past it: 429 TooManyWaits; 0 = no limit). A wait checks its
# run's stored status every RUN_WAIT_RECHECK_SECONDS besides the run's events (one query for
# every wait of a process). RUN_ADMISSIONS_AT_ONCE requests of a web process admit runs (or
# read a waited-for run) at once; the rest take turns, leaving the process's other requests
# a thread, a connection and the interpreter.
RUN_WAITS_PER_USER_MAX = int(os.environ.get("RUN_WAITS_PER_USER_MAX", "50"))
RUN_WAIT_RECHECK_SECONDS = float(os.environ.get("RUN_WAIT_RECHECK_SECONDS", "5"))
RUN_ADMISSIONS_AT_ONCE = int(os.environ.get("RUN_ADMISSIONS_AT_ONCE", "2"))
# A worker asked to stop (SIGTERM) lets its live runs end for this long; those still running
# then stop and go to other workers at once (runs_app/execution/drain.py). Keep it under the
# stop timeout of what runs the worker (systemd's TimeoutStopSec, compose's
# stop_grace_period: 10 s).
RUN_DRAIN_SECONDS = float(os.environ.get("RUN_DRAIN_SECONDS", "7"))
# A run's task is stopped after this long (the soft limit ends the run in "error" first).
RUN_TIME_LIMIT_SECONDS = int(os.environ.get("RUN_TIME_LIMIT_SECONDS", "3600"))
CELERY_TASK_TIME_LIMIT = RUN_TIME_LIMIT_SECONDS + 60
CELERY_TASK_SOFT_TIME_LIMIT = RUN_TIME_LIMIT_SECONDS
