"""How a run's loop stops short: the exceptions its phases raise to end it."""

from __future__ import annotations

from quotas_app import services as quotas

from ..fencing import LeaseLost

UNFINISHED = {"pending", "running"}


class Aborted(Exception):
    pass


# The run's lease is gone (the keeper could not renew it in time, or a write found another
# execution's epoch): not a row more.
LockLost = LeaseLost


class ContextOverflow(Exception):
    """The model refused the transcript as too long before answering anything: the step is
    given up, to be tried once more after a compaction."""


class AwaitingApproval(Exception):
    """A tool call of the batch waits for the owner's decision: the run parks (docs/semantics.md
    §8.2)."""


class BudgetReached(Exception):
    """The owner's tokens per day or cost per month ran out during the run: it stops before
    its next model call (its last step finished) and ends ``error`` with reason ``quota``."""

    def __init__(self, overrun: quotas.Overrun) -> None:
        super().__init__(overrun.message)
        self.overrun = overrun
