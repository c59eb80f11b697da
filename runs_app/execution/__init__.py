"""Where runs execute: the process's run host and the agent loop it carries, with what
keeps them safe (leases, fencing, aborts, the drain, the sweep).

Entry points for the rest of the project (tests/test_structure.py holds them to these):
``runtime`` (the mode, ``enqueue``), ``host`` (``host``, ``run_agent``), ``fencing``
(``LeaseLost``, ``fence``), ``unfinished`` (what a dead execution left open), ``drain`` and
``sweeper``. Nothing here is imported from this package's ``__init__``: importing one entry
point must not import the host.
"""
