"""The history retention of one process: a slice of the deployments per pass, on the live
replica that owns the job.

The index stream's limits ARE the retention (docs/configuration.md, "History retention");
what this loop adds is purging the events of the finished Runs the index no longer keeps
(``RunHistory.enforce``). A pass costs about a third of a millisecond of CPU per deployment
(bench/held.py), so a pass over every deployment each interval made retention the one idle
cost that grew with the number of Schedules: each pass visits the next slice instead,
every deployment at least once per ``RETENTION_ROUND_SECONDS``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ..clock import Clock, sleep_for
from ..ports.history import RunHistory
from ..projections.ledger import Ledger
from ..projections.schedule_table import ScheduleTable

log = logging.getLogger(__name__)

RETENTION_ROUND_SECONDS = 3600.0
"""Every deployment's history is trimmed at least once per this many seconds."""

RETENTION_OWNER_KEY = "history retention"
"""The ownership key of the retention pass: one live replica runs it."""


def retention_slice(deployments: Sequence[str], cursor: int, interval: float,
                    round_seconds: float) -> tuple[list[str], int]:
    """The deployments one retention pass visits, and where the next pass starts.

    Passes every ``interval`` seconds visit consecutive slices so that every deployment is
    visited at least once per ``round_seconds`` (all of them each pass when the interval is
    that long or longer).
    """
    if not deployments:
        return [], 0
    passes = max(1, int(round_seconds // interval)) if interval < round_seconds else 1
    size = -(-len(deployments) // passes)  # ceil
    start = cursor if cursor < len(deployments) else 0
    return list(deployments[start:start + size]), start + size


class Retention:
    """Purges finished Runs past retention: all at once on request, or a slice per pass."""

    def __init__(self, history: RunHistory, table: ScheduleTable, ledger: Ledger,
                 clock: Clock, *, interval: float, owns: Callable[[str], bool]) -> None:
        self._history = history
        self._table = table
        self._ledger = ledger
        self._clock = clock
        self._interval = interval
        self._owns = owns
        self._cursor = 0

    async def enforce(self) -> int:
        """Purge the events of finished Runs past retention, now; returns deployments cut."""
        deployments = [record.deployment_id for record in self._table.all()]
        return await self._history.enforce(deployments, self._ledger.unfinished())

    async def run_pass(self) -> int:
        """One pass: the next slice of the deployments; returns Runs cut."""
        # in the table's kept order: a sort of a million IDs every pass was a second of CPU
        deployments = [record.deployment_id for record in self._table.in_order()]
        batch, self._cursor = retention_slice(deployments, self._cursor, self._interval,
                                              RETENTION_ROUND_SECONDS)
        return await self._history.enforce(batch, self._ledger.unfinished())

    async def forever(self) -> None:
        """A pass every ``interval`` of elapsed time (a period, not an instant: a clock
        stepped forward must not run passes back to back), when this replica owns the job."""
        while True:
            await sleep_for(self._clock, self._interval)
            if not self._owns(RETENTION_OWNER_KEY):
                continue
            try:
                await self.run_pass()
            except Exception:
                log.warning("applying the history retention failed; trying again later",
                            exc_info=True)
