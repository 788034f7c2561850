"""Count the due times that pass without a Run: skipped by reason, and the unexplained ones.

Once a minute, for the due times that passed a minute ago or more (the account's grace,
``core/dueaccount.PENDING_GRACE``: a missing Run before it is pending), each due time is
counted once, by the replica that owns it (the same owner that fires it,
``core/ownership.py``): ``astrabox.scheduler.due_times.skipped`` with the reason when its
Schedule was disabled or held, ``astrabox.scheduler.due_times.unexplained`` (and a warning
naming it) when the Schedule was active and no Run is stored. Outages are counted by the
replica whose start ended them (``runtime/outage_watch.py``): a process counts only what
it lived through.

Cheap at 100,000 Schedules: no write, a pass away from the minute boundaries, due times
computed once per calendar and window, a Run looked up in this process's ledger (the
recent Runs, each deployment's newest scheduled Run) before the store is asked, in batches.
A Schedule changed within the window is judged only from its change on (this process keeps
no older state): the metric leaves out the due times of the minute a Schedule changed,
which ``nats-scheduler explain`` accounts for.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from ..clock import Clock
from ..core import calendar
from ..core.dueaccount import CHANGE_MARGIN, PENDING_GRACE, Reason
from ..core.events import ScheduleRecord
from ..jetstream.history import RunHistory
from ..names import scheduled_run_id
from ..projections.ledger import Ledger
from ..projections.schedule_table import ScheduleTable
from .metrics import Metrics

log = logging.getLogger(__name__)

PASS_SECONDS = 60.0
"""How often the due times that passed are counted."""

PASS_OFFSET = 40.0
"""Seconds after a minute boundary a pass runs: away from the busy second of a herd."""

Owns = Callable[[str, datetime], bool]

_CHANGE_MARGIN = timedelta(seconds=CHANGE_MARGIN)

_Window = tuple[datetime, datetime, datetime, dict[tuple[str, str], tuple[datetime, ...]]]
"""A pass's window ``(lo, hi]``; the instant a Schedule changed at or before is judged
from ``lo`` (``lo`` less the change's margin); the due times in the window by calendar."""


@functools.lru_cache(maxsize=4096)
def _dues(cron: str, timezone: str, lo: datetime, hi: datetime) -> tuple[datetime, ...]:
    """Due times in ``(lo, hi]`` (cached: Schedules of one calendar share a pass's window)."""
    try:
        return tuple(calendar.due_times(cron, timezone, lo, hi + timedelta(microseconds=1)))
    except ValueError:
        return ()


class DueWatch:
    """The passes of one replica over the due times it owns."""

    def __init__(self, table: ScheduleTable, ledger: Ledger, history: RunHistory,
                 clock: Clock, metrics: Metrics, *, owns: Owns) -> None:
        self._table = table
        self._ledger = ledger
        self._history = history
        self._clock = clock
        self._metrics = metrics
        self._owns = owns
        self._mark: datetime | None = None

    def start_at(self, began: datetime) -> None:
        """Count the due times after ``began`` (this process's start, on the store's clock)."""
        self._mark = began

    async def forever(self) -> None:
        """A pass every minute, ``PASS_OFFSET`` after the boundary, once :meth:`start_at`."""
        while True:
            now = self._clock.now()
            boundary = now.replace(second=0, microsecond=0)
            at = boundary + timedelta(seconds=PASS_OFFSET)
            if at <= now:
                at += timedelta(seconds=PASS_SECONDS)
            await self._clock.sleep_until(at)
            if self._mark is not None:
                try:
                    await self.run_pass(self._clock.now())
                except Exception:
                    log.warning("could not count the due times that passed", exc_info=True)

    async def run_pass(self, now: datetime) -> None:
        """Count the due times in ``(mark, now - grace]`` and move the mark there."""
        if self._mark is None:
            return
        lo, hi = self._mark, now - timedelta(seconds=PENDING_GRACE)
        if hi <= lo:
            return
        skipped: dict[str, int] = {}
        unknown: list[tuple[str, datetime]] = []
        window: _Window = (lo, hi, lo - _CHANGE_MARGIN, {})
        for record in self._table.live():
            self._judge(record, window, skipped, unknown)
        missing = await self._missing(unknown)
        for reason, count in skipped.items():
            self._metrics.due_times_skipped(reason, count)
        self._metrics.due_times_unexplained(len(missing))
        for deployment_id, due in missing:
            log.warning("due time %s of %s has no Run a minute later, and nothing explains "
                        "it: see nats-scheduler explain %s", due.isoformat(), deployment_id,
                        deployment_id)
        self._mark = hi

    def _judge(self, record: ScheduleRecord, window: _Window, skipped: dict[str, int],
               unknown: list[tuple[str, datetime]]) -> None:
        """Judge ``record``'s due times in the window, from ``lo`` or its change's margin
        if later (most Schedules: unchanged, from ``lo``, their calendar's due times looked
        up once per pass)."""
        lo, hi, unchanged_by, calendars = window
        if record.updated_at <= unchanged_by:  # from lo: max(lo, updated_at + margin)
            key = (record.cron, record.timezone)
            found = calendars.get(key)
            if found is None:
                found = calendars[key] = _dues(record.cron, record.timezone, lo, hi)
        else:
            start = record.updated_at + _CHANGE_MARGIN
            if start >= hi:
                return
            found = _dues(record.cron, record.timezone, start, hi)
        if not found:
            return
        dep = record.deployment_id
        dues = [d for d in found if self._owns(dep, d)]
        if not dues:
            return
        if not record.active:
            reason = Reason.DISABLED if not record.enabled else Reason.HELD
            skipped[reason.value] = skipped.get(reason.value, 0) + len(dues)
            return
        newest = self._ledger.summary(dep).last_scheduled
        for due in dues:
            if newest is not None and newest.due == due.timestamp():
                continue
            if self._ledger.get(scheduled_run_id(dep, due)) is None:
                unknown.append((dep, due))

    async def _missing(self, unknown: list[tuple[str, datetime]]) -> list[tuple[str, datetime]]:
        """The due times among ``unknown`` whose Run the store does not hold either."""
        if not unknown:
            return []
        ids = {scheduled_run_id(dep, due): (dep, due) for dep, due in unknown}
        found = await self._history.states((dep, run_id) for run_id, (dep, _) in ids.items())
        return [pair for run_id, pair in ids.items() if run_id not in found]
