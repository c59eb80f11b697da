"""Benchmarks of the platform (``./dev bench``): streaming latency, checkpoint cost, history
load and memory, each printed beside its floor or baseline with the ratio.

Not timed tests: they need PostgreSQL and Redis and take minutes. See ``__main__`` for options.
"""
