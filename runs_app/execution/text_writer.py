"""The streamed text of every run of the process, written together: a loop's recorder hands
over a part whose text grew (``add``), and every ``STREAM_FLUSH_SECONDS`` one statement
(``checkpoint.write_streamed_texts``) stores the text of the parts handed over so far,
instead of a transaction per run — at most ``STREAM_FLUSH_BATCH`` parts a statement, the
longest-waiting first: hundreds of runs would else make one statement that holds hundreds of
rows (and the database threads the runs' steps need) for a long while; the others wait for
the next tick. A run whose text is refused (its lease epoch is another execution's) stops."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from django.conf import settings

from ..checkpoint import write_streamed_texts
from .control import RunControl
from .threads import Threads

log = logging.getLogger(__name__)


class TextWriter:
    def __init__(self, threads: Threads) -> None:
        self.threads = threads
        self.texts: dict[str, tuple[Any, RunControl]] = {}  # part id → (part, its run)
        self.writing: asyncio.Future | None = None  # the batch in flight

    def add(self, part: Any, control: RunControl) -> None:
        """(On the loop.) Write ``part``'s text with the next tick's batch, unless its run
        has lost its lease by then (another worker may own the session)."""
        self.texts[part.id] = (part, control)

    async def run(self) -> None:
        """(The writer's task, forever.)"""
        while True:
            await asyncio.sleep(settings.STREAM_FLUSH_SECONDS)
            if self.texts:
                await self._write_batch()

    async def _write_batch(self) -> None:
        taken = list(self.texts.items())[: settings.STREAM_FLUSH_BATCH]
        for part_id, _ in taken:
            del self.texts[part_id]
        batch = [
            (part_id, part.text, control.run_id, control.epoch)
            for part_id, (part, control) in taken
            if not control.lost.is_set()
        ]
        controls = {control.run_id: control for _, (_, control) in taken}
        self.writing = asyncio.ensure_future(self.threads.blocking(write_streamed_texts, batch))
        try:
            lost = await self.writing
        except Exception:  # each step's own flush writes its text whole anyway
            log.warning("writing the streamed text of %d parts failed", len(batch))
            lost = set()
        finally:
            self.writing = None
        for run_id in lost:  # another execution owns these runs: they stop at once
            log.warning("run %s: its streamed text was refused (lease epoch)", run_id)
            controls[run_id].lost.set()

    def busy(self) -> bool:
        return self.writing is not None and not self.writing.done()

    async def written(self) -> None:
        """(On the loop.) Once the batch in flight, if any, is written."""
        writing = self.writing
        if writing is not None and not writing.done():
            await asyncio.wait([writing])
