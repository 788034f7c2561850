"""Writing and reading Schedule events: the store plus read-your-writes into the table.

A Schedule change is decided on the Schedule as the stream leader has it and appended
conditionally on that subject's last sequence (``Nats-Expected-Last-Subject-Sequence``). A
concurrent writer makes the append fail; the change is then decided again on the new
state, so two replicas applying different versions, or an operator holding while AstraBox
applies, never lose one another's change.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from ..core.events import ScheduleEventType, ScheduleRecord, decode_schedule_event, encode
from ..names import schedule_event_msg_id
from ..projections.schedule_table import ScheduleTable
from ..seam import SchedulerUnavailable
from .errors import Conflict
from .store import Store

Decide = Callable[[ScheduleRecord | None], ScheduleEventType | None]
"""Given the stored Schedule (None: never applied), the event to append, or None for none.

It may raise a seam error (for example ScheduleNotFound) to refuse the change."""

MAX_DECISIONS = 50
"""How often one change is decided again after losing a race before it gives up. Each lost
race means another writer's change was stored, so this bounds livelock, not waiting."""


class ScheduleLog:
    """Append and read the events of Schedules."""

    def __init__(self, store: Store, table: ScheduleTable) -> None:
        self._store = store
        self._table = table
        self._names = store.names

    async def read(self, deployment_id: str) -> ScheduleRecord | None:
        """The Schedule as the stream leader has it (also applied to the table), or None."""
        last = await self._store.last(self._names.schedule_subject(deployment_id))
        if last is None:
            return None
        record = decode_schedule_event(last.data).schedule
        self._table.apply(last.seq, record)
        return record

    async def write(self, deployment_id: str, decide: Decide) -> ScheduleRecord | None:
        """Decide on the stored state and append conditionally; on a race, decide again.

        Returns the Schedule after the change (or as stored, when ``decide`` wrote nothing).
        """
        subject = self._names.schedule_subject(deployment_id)
        for _ in range(MAX_DECISIONS):
            last = await self._store.last(subject)
            seq, current = 0, None
            if last is not None:
                seq, current = last.seq, decode_schedule_event(last.data).schedule
                self._table.apply(seq, current)
            event = decide(current)
            if event is None:
                return current
            try:
                new_seq, _ = await self._store.append(
                    subject, encode(event), expected_seq=seq,
                    msg_id=schedule_event_msg_id(deployment_id, seq),
                )
            except Conflict:
                continue
            self._table.apply(new_seq, event.schedule)
            return event.schedule
        raise SchedulerUnavailable(
            f"could not change the schedule of deployment {deployment_id!r}: "
            "too many concurrent changes"
        )

    async def as_of(self, deployment_id: str, instant: datetime) -> ScheduleRecord | None:
        """The Schedule as its last event stored at or before ``instant`` left it.

        One read when nothing changed since (the usual case); otherwise a walk over the
        Schedule's own events, which are few (one per change, never one per firing).
        """
        subject = self._names.schedule_subject(deployment_id)
        last = await self._store.last(subject)
        if last is None or (last.stored_at is not None and last.stored_at <= instant):
            return None if last is None else decode_schedule_event(last.data).schedule
        state: ScheduleRecord | None = None
        seq = 1
        while (msg := await self._store.next(subject, seq)) is not None:
            if msg.stored_at is not None and msg.stored_at > instant:
                break
            state = decode_schedule_event(msg.data).schedule
            seq = msg.seq + 1
        return state
