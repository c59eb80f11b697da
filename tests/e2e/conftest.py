from __future__ import annotations

import pytest

from .stack import Processes


@pytest.fixture
def procs():
    """Subprocesses (Daphne, Celery workers) stopped at the end of the test."""
    processes = Processes()
    yield processes
    processes.stop()
