"""The garbage collector and the interpreter's thread switching in the long-lived processes
(the worker's run host, Daphne).

Two things stopped every run's tokens for a while, measured with the streaming benchmark's
500 live runs in one worker (``BENCH_GC_LOG``):

* A full collection walks every tracked object, and a process that imported the project (the
  provider SDKs' typed models above all) holds about 300,000 that live as long as it does:
  on this 2-core machine a full collection took 160 ms before any run, 250-400 ms with 500
  live runs, every 5-9 s. ``gc.freeze()`` after the imports moves them to a generation the
  collector never walks (what CPython documents for long-lived servers); p99 with all 500
  runs streaming went from 480-550 ms to 240-275 ms.
* What was left were full collections of the runs' own objects (100-140 ms, as often): they
  come after ten collections of the middle generation, each after ten of the youngest, each
  after 700 new containers, a few milliseconds of streaming. With the youngest collected
  every 20,000 new containers and 20 of each before the next older one, a full collection
  did not happen once in the 60 s of the benchmark and p99 fell to 175 ms. Cyclic garbage
  waits a little longer to be freed; nothing else changes (reference counting frees the
  rest at once).

And the interpreter's hand-overs: in both processes the event loop's thread and the threads
that run the database work pass the interpreter to each other many times a request or a
run's start (a statement's answer wakes a thread that must wait for it). CPython lets a
busy thread keep it for 5 ms before a waiting one gets it; here 1 ms. Measured with
``BENCH_STREAMING=fifty``, three pairs alternating with the commit before: the first token of
50 runs asked for at once at p99 0.81–0.94 s as deployed against 0.88–0.98 s, at equal
weights 0.78–0.88 against 0.79–0.92 s, the CPU per token the same — a gain smaller than
one run differs from the next, kept because it costs nothing measurable.
"""

from __future__ import annotations

import gc
import sys
import threading

# gen0: new containers between collections of the youngest generation; gen1, gen2: how many
# collections of the generation below before the next older one is collected too.
THRESHOLDS = (20_000, 20, 20)
# Seconds a thread may hold the interpreter while another waits for it (CPython: 0.005).
SWITCH_INTERVAL = 0.001

_done = False
_guard = threading.Lock()


def settle() -> None:
    """Once per process, after the imports: collect what is garbage, freeze what is left,
    space the collections out (``THRESHOLDS``) and let a waiting thread have the
    interpreter sooner (``SWITCH_INTERVAL``)."""
    global _done
    with _guard:
        if _done:
            return
        gc.collect()
        gc.freeze()
        gc.set_threshold(*THRESHOLDS)
        sys.setswitchinterval(SWITCH_INTERVAL)
        _done = True
