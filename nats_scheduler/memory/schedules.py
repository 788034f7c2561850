"""The Schedule journal in memory (the contract: :mod:`nats_scheduler.ports.schedules`).

Each Schedule is a list of stored events; a change is decided on the last one and appended
only on its position, decided again when another writer got there first. What is stored or
read is applied to this process's Schedule table at once; the feed delivers every change
(the last event of each Schedule first) a moment later.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from datetime import datetime

from ..core.events import ScheduleRecord
from ..core.schedulecore import PlannedWrite
from ..names import schedule_event_msg_id
from ..ports.foreign import ForeignMessage
from ..ports.schedules import Decide, OnSchedule, ScheduleCopies
from ..seam import SchedulerUnavailable
from .feeds import MemoryFeed
from .retry import retrying
from .store import Foreign, MemoryStore, StoredEvent, last_ours

MAX_DECISIONS = 50


class MemorySchedules:
    """One process's Schedule journal over :class:`MemoryStore`."""

    def __init__(self, store: MemoryStore, table: ScheduleCopies, *, identity: str,
                 retry_seconds: float) -> None:
        self._store = store
        self._table = table
        self._identity = identity
        self._retry_seconds = retry_seconds
        self._decisions = itertools.count(1)

    def _last(self, deployment_id: str) -> StoredEvent | None:
        """The Schedule's last event of ours: foreign messages after it are stepped over, a
        write goes after them (as the JetStream journal: jetstream/foreign.py)."""
        return last_ours(self._store.schedules.get(deployment_id))

    async def read(self, deployment_id: str) -> ScheduleRecord | None:
        await retrying("could not read", self._store.operation, self._retry_seconds)
        last = self._last(deployment_id)
        if last is None:
            return None
        record: ScheduleRecord = last.event.schedule  # type: ignore[union-attr]
        self._table.apply(last.seq, record)
        return record

    async def write(self, deployment_id: str, decide: Decide, *,
                    on_copy: bool = True) -> ScheduleRecord | None:
        for _ in range(MAX_DECISIONS):
            await retrying("could not change a schedule", self._store.operation,
                           self._retry_seconds)
            last = self._last(deployment_id)
            current = None if last is None else last.event.schedule  # type: ignore[union-attr]
            event = decide(current)
            if event is None:
                return current
            seq = 0 if last is None else last.seq
            if self._append(deployment_id, seq, event):
                return event.schedule
        raise SchedulerUnavailable(
            f"could not change the schedule of deployment {deployment_id!r}: "
            "too many concurrent changes")

    def _append(self, deployment_id: str, expected: int, event: object) -> bool:
        """Append ``event`` if the Schedule's last position is ``expected``."""
        last = self._last(deployment_id)
        if (0 if last is None else last.seq) != expected:
            return False
        store = self._store
        store.schedule_seq += 1
        msg_id = schedule_event_msg_id(deployment_id, expected,
                                       f"{self._identity}-{next(self._decisions)}")
        stored = StoredEvent(store.schedule_seq, store.now(), event, msg_id)  # type: ignore[arg-type]
        store.schedules.setdefault(deployment_id, []).append(stored)
        self._table.apply(stored.seq, event.schedule)  # type: ignore[attr-defined]
        store.stored_schedule_event(stored)
        return True

    async def write_planned(self, planned: Sequence[PlannedWrite],
                            redecide: Callable[[PlannedWrite], Decide]) -> None:
        for item in planned:
            await retrying("could not change a schedule", self._store.operation,
                           self._retry_seconds)
            if not self._append(item.deployment_id, item.seq, item.event):
                await self.write(item.deployment_id, redecide(item), on_copy=False)

    async def as_of(self, deployment_id: str, instant: datetime) -> ScheduleRecord | None:
        await retrying("could not read", self._store.operation, self._retry_seconds)
        state = None
        for stored in self._store.schedules.get(deployment_id, []):
            if stored.stored_at > instant:
                break
            if not isinstance(stored.event, Foreign):
                state = stored.event.schedule
        return state

    async def end_once(self) -> int:
        await self._store.operation()
        return self._store.schedule_seq

    async def settled(self) -> None:
        return None

    def feed(self, on_schedule: OnSchedule, *,
             on_skip: Callable[[], None] | None = None, after: int | None = None
             ) -> MemoryFeed:
        def replay() -> list[StoredEvent]:
            # the last message of each Schedule, and when that is foreign (skipped) the last
            # of ours before it, as the JetStream feed reads it again
            last: list[StoredEvent] = []
            for events in self._store.schedules.values():
                if not events:
                    continue
                last.append(events[-1])
                ours = last_ours(events)
                if ours is not None and ours is not events[-1]:
                    last.append(ours)
            return sorted((stored for stored in last if stored.seq > (after or 0)),
                          key=lambda stored: stored.seq)

        def apply(stored: StoredEvent) -> None:
            if isinstance(stored.event, Foreign):
                raise ForeignMessage(f"#{stored.seq}", stored.event.why)  # skipped, counted
            on_schedule(stored.seq, stored.event.schedule)

        return MemoryFeed(self._store.subscribe_schedules, apply, replay, on_skip)
