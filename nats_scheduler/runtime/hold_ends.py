"""Holds that end by themselves: the release written when a hold's ``until`` comes.

Firing does not wait for it: from the hold's end on, the ticker plans the Schedule and the
firing treats the hold as lifted (``ScheduleRecord.fires_at``), release stored or not. The
release is the record of it (docs/operations.md, "Holds that end"): a ``schedule.released``
by ``system`` with the hold's reason and its end, stored at the end by the store's clock.

One replica writes it: the one that owns the end's instant among the live replicas (the
ticker's rule, ``core/ownership.py``) at the end itself; the others look again a grace
later and write it only if it is still missing (the owner gone or failing). Every attempt
is decided on the stored Schedule and appended on its last sequence, like every Schedule
change, so of any number of replicas trying, one release is stored, and a hold released or
changed meanwhile is left as it is.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import NamedTuple

from ..clock import Clock
from ..core import schedulecore
from ..core.events import ScheduleEventType, ScheduleRecord
from ..ports.schedules import ScheduleJournal
from .metrics import Metrics

log = logging.getLogger(__name__)

OTHERS_GRACE_SECONDS = 3.0
"""How long after a hold's end the replicas that do not own it write its release if it is
still missing (the ticker's owner grace)."""

RETRY_SECONDS = 1.0
"""How soon a release that failed to store (the store unavailable) is tried again."""

Owns = Callable[[str, datetime], bool]
"""(deployment, instant) -> whether this replica owns that instant of that Schedule."""


class _End(NamedTuple):
    """A heap entry: look at ``deployment_id``'s hold at ``look_at`` (its end, or later)."""

    look_at: datetime
    deployment_id: str
    until: datetime


class HoldEnds:
    """Every hold with an end this replica knows of, and the loop that releases them."""

    def __init__(self, schedules: ScheduleJournal, clock: Clock, identity: str, *,
                 owns: Owns | None = None, metrics: Metrics | None = None,
                 grace: float = OTHERS_GRACE_SECONDS) -> None:
        self._schedules = schedules
        self._clock = clock
        self._identity = identity
        self._owns = owns
        self._metrics = metrics or Metrics.disabled()
        self._grace = timedelta(seconds=grace)
        self._ends: dict[str, datetime] = {}
        """Deployment -> the end of its hold, as the Schedule table last showed it."""
        self._heap: list[_End] = []
        self._wake = asyncio.Event()
        self.released = 0
        """Releases this replica stored."""

    def update(self, record: ScheduleRecord) -> None:
        """Follow a Schedule change (the Schedule table's listener)."""
        hold = record.hold
        until = None if hold is None or record.deleted else hold.until
        if until is None:
            self._ends.pop(record.deployment_id, None)  # its heap entries become stale
            return
        if self._ends.get(record.deployment_id) == until:
            return
        self._ends[record.deployment_id] = until
        heapq.heappush(self._heap, _End(until, record.deployment_id, until))
        self._wake.set()

    @property
    def pending(self) -> int:
        """Holds with an end not released yet, as this replica sees them."""
        return len(self._ends)

    async def run(self) -> None:
        """Release each hold when its end comes, until cancelled."""
        while True:
            await self._wait()
            now = self._clock.now()
            while self._heap and self._heap[0].look_at <= now:
                entry = heapq.heappop(self._heap)
                if self._ends.get(entry.deployment_id) != entry.until:
                    continue  # released, changed or deleted meanwhile
                if self._owns is None or self._owns(entry.deployment_id, entry.until) or (
                        now >= entry.until + self._grace):
                    await self._release(entry)
                else:
                    heapq.heappush(self._heap, entry._replace(look_at=entry.until + self._grace))

    async def _wait(self) -> None:
        """Until the first entry's instant, or a change."""
        self._wake.clear()
        if self._heap and self._heap[0].look_at <= self._clock.now():
            return
        waiters = [asyncio.create_task(self._wake.wait())]
        if self._heap:
            waiters.append(asyncio.create_task(self._clock.sleep_until(self._heap[0].look_at)))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _release(self, entry: _End) -> None:
        """Store the release, decided on the stored Schedule; on failure, try again soon."""
        decided: list[object] = []

        def decide(current: ScheduleRecord | None) -> ScheduleEventType | None:
            event = schedulecore.decide_hold_end(current, now=self._clock.now(),
                                                 actor=self._identity)
            decided.append(event)
            return event

        try:
            await self._schedules.write(entry.deployment_id, decide)
        except Exception:
            log.warning("could not release the hold of %s at its end; trying again",
                        entry.deployment_id, exc_info=True)
            heapq.heappush(self._heap, entry._replace(
                look_at=self._clock.now() + timedelta(seconds=RETRY_SECONDS)))
            return
        if decided and decided[-1] is not None:  # the last decision is what was stored
            self.released += 1
            self._metrics.hold_ended()
            log.info("the hold of %s ended at %s: released", entry.deployment_id,
                     entry.until.isoformat())
