"""The garbage collector of the long-lived processes (the worker's run host, Daphne).

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
"""

from __future__ import annotations

import gc
import threading

# gen0: new containers between collections of the youngest generation; gen1, gen2: how many
# collections of the generation below before the next older one is collected too.
THRESHOLDS = (20_000, 20, 20)

_done = False
_guard = threading.Lock()


def settle() -> None:
    """Once per process, after the imports: collect what is garbage, freeze what is left, and
    space the collections out (``THRESHOLDS``)."""
    global _done
    with _guard:
        if _done:
            return
        gc.collect()
        gc.freeze()
        gc.set_threshold(*THRESHOLDS)
        _done = True
