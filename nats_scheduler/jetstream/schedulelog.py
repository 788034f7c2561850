"""Writing and reading Schedule events: the store plus read-your-writes into the table.

A Schedule change is decided on the Schedule as the stream leader has it and appended
conditionally on that subject's last sequence (``Nats-Expected-Last-Subject-Sequence``). A
concurrent writer makes the append fail; the change is then decided again on the new
state, so two replicas applying different versions, or an operator holding while AstraBox
applies, never lose one another's change.

The first decision is taken on the Schedule table's copy (the last event this process saw of
the subject, with its sequence), which saves the read in the usual case: the append is
conditional on exactly that sequence, so it is stored only if the leader's last event IS that
copy, and a stale copy makes it fail and the change is decided on the leader's state. A
decision to write nothing, or a refusal, is never taken on the copy alone: it is confirmed on
the leader's state, since a stale copy could make a needed write look like a no-op.

The table is the runtime's projection (``projections/schedule_table.py``); this adapter
sees it only as a :class:`ScheduleCopies`, so the layer below never imports the one above.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime

from ..core.events import ScheduleRecord, encode
from ..core.schedulecore import PlannedWrite
from ..names import (
    HDR_EXPECTED_LAST_SUBJECT_SEQUENCE,
    HDR_MSG_ID,
    schedule_event_msg_id,
    untoken,
)
from ..ports.schedules import Decide, OnSchedule, ScheduleCopies
from ..seam import SchedulerUnavailable
from .acks import Outgoing
from .errors import Conflict, is_conflict
from .event_store import EventStore
from .follower import Follower
from .foreign import ForeignMessage, schedule_event_on

log = logging.getLogger(__name__)

REPAIRS_AT_ONCE = 16
"""Schedules read again at once after foreign messages (a flood of them waits its turn)."""

MAX_DECISIONS = 50
"""How often one change is decided again after losing a race before it gives up. Each lost
race means another writer's change was stored, so this bounds livelock, not waiting."""

PIPELINE_CHUNK = 500
"""Planned writes sent per batch: the batch's acknowledgement must arrive within the
publisher's timeout, so a batch is what the server stores in well under it."""

PIPELINE_BYTES = 4 * 1024 * 1024
"""At most this many bytes of events per batch (a Schedule may carry a prompt of hundreds
of KiB): an atomic batch is staged whole on the server before it is committed."""

PIPELINE_BATCHES = 4
"""Batches in flight at once."""


def _headers(msg_id: str, expected_seq: int) -> dict[str, str]:
    return {HDR_MSG_ID: msg_id, HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: str(expected_seq)}


class ScheduleLog:
    """Append and read the events of Schedules."""

    def __init__(self, store: EventStore, table: ScheduleCopies, *,
                 on_stale: Callable[[], None] | None = None) -> None:
        self._store = store
        self._table = table
        self._names = store.names
        self._on_stale = on_stale or (lambda: None)
        self._repairs: dict[str, asyncio.Task[None]] = {}
        """Subject -> its read after a foreign message (one at a time per subject)."""
        self._repairing = asyncio.Semaphore(REPAIRS_AT_ONCE)

    async def read(self, deployment_id: str) -> ScheduleRecord | None:
        """The Schedule as the stream leader has it (also applied to the table), or None."""
        return (await self._leader_state(self._names.schedule_subject(deployment_id)))[1]

    async def write(self, deployment_id: str, decide: Decide, *,
                    on_copy: bool = True) -> ScheduleRecord | None:
        """Decide on the stored state and append conditionally; on a race, decide again.

        Returns the Schedule after the change (or as stored, when ``decide`` wrote nothing).
        The first decision uses the table's copy (see the module docstring) unless
        ``on_copy`` is False; ``decide`` may therefore be called more than once and must not
        act beyond returning or raising.
        """
        subject = self._names.schedule_subject(deployment_id)
        first = 0 if on_copy else 1
        for attempt in range(first, MAX_DECISIONS):
            seq, current = (self._known(deployment_id) if attempt == 0
                            else await self._leader_state(subject))
            try:
                event = decide(current)
            except Exception:
                if attempt == 0:
                    continue  # a refusal on the copy: confirm it on the leader's state
                raise
            if event is None:
                if attempt == 0:
                    continue  # nothing to write by the copy: confirm on the leader's state
                return current
            data = encode(event)
            msg_id = schedule_event_msg_id(deployment_id, seq, self._store.decisions.next())
            if attempt == 0:
                stored = await self._append_on_copy(subject, data, seq, msg_id)
                if stored is None:
                    continue  # the copy was stale (or the append unanswered): on the leader's
                new_seq = stored
            else:
                try:
                    new_seq, _ = await self._store.append(subject, data, expected_seq=seq,
                                                          msg_id=msg_id, judge=schedule_event_on)
                except Conflict:
                    continue
            self._table.apply(new_seq, event.schedule)
            return event.schedule
        raise SchedulerUnavailable(
            f"could not change the schedule of deployment {deployment_id!r}: "
            "too many concurrent changes"
        )

    async def _append_on_copy(self, subject: str, data: bytes, seq: int,
                              msg_id: str) -> int | None:
        """Append a change decided on the table's copy, once; its sequence, or None.

        Sent once, not through the store's retries: a refusal here means the copy was
        stale, not that two writers raced on the stored state, so it is counted apart
        (``on_stale``), not as a conflict; any other failure is left to the decision on the
        leader's state that follows, which retries (and finds the change if it was stored).
        """
        try:
            ack = await self._store.publish_once(subject, data, _headers(msg_id, seq))
        except Exception as exc:
            if is_conflict(exc):
                self._on_stale()
            return None
        return None if ack.duplicate else ack.seq

    async def write_planned(self, planned: Sequence[PlannedWrite],
                            redecide: Callable[[PlannedWrite], Decide]) -> None:
        """Store changes decided on the table's copy, in batches (``reconcile``).

        Each is appended conditionally on the sequence it was decided on, exactly as the first
        attempt of :meth:`write`; one the store refuses (a writer got there first) or does
        not acknowledge is decided again on the leader's state through :meth:`write` with
        ``redecide(planned)``, so the outcome is that of one :meth:`write` per change.
        A batch goes as one ADR-50 atomic batch: one acknowledgement for hundreds of
        changes, where a million new Schedules were a million acknowledgements to read.
        One stale copy refuses the whole batch; it is then sent again one change at a time,
        each with its own answer, as before.
        """
        chunks = self._chunks(planned)  # encoded as sent: never a million events at once

        async def sender() -> None:
            for chunk in chunks:
                for item in await self._send(chunk):
                    await self.write(item.deployment_id, redecide(item), on_copy=False)

        await asyncio.gather(*(sender() for _ in range(PIPELINE_BATCHES)))

    def _chunks(self, planned: Sequence[PlannedWrite]
                ) -> Iterator[list[tuple[PlannedWrite, Outgoing]]]:
        """The planned writes as messages, in batches of at most ``PIPELINE_CHUNK`` writes
        and ``PIPELINE_BYTES`` bytes (one at least)."""
        decisions = self._store.decisions
        chunk: list[tuple[PlannedWrite, Outgoing]] = []
        size = 0
        for item in planned:
            data = encode(item.event)
            if chunk and (len(chunk) >= PIPELINE_CHUNK or size + len(data) > PIPELINE_BYTES):
                yield chunk
                chunk, size = [], 0
            message = Outgoing(self._names.schedule_subject(item.deployment_id), data, _headers(
                schedule_event_msg_id(item.deployment_id, item.seq, decisions.next()),
                item.seq))
            chunk.append((item, message))
            size += len(data)
        if chunk:
            yield chunk

    async def _send(self, chunk: Sequence[tuple[PlannedWrite, Outgoing]]
                    ) -> list[PlannedWrite]:
        """Send one batch and apply what was stored; returns the writes to decide again."""
        items = [item for item, _ in chunk]
        results = await self._store.publish_atomic_or_each(
            self._names.schedules_stream, [message for _, message in chunk],
            resend=lambda: True)  # decided on the copy: each may still be sent on its own
        if isinstance(results, Exception):
            return items  # unanswered: each decided again on the leader's state
        retry = []
        for item, result in zip(items, results, strict=True):
            if isinstance(result, Exception) and is_conflict(result):
                self._on_stale()
            if isinstance(result, Exception) or result.duplicate:
                retry.append(item)  # refused, lost, or not ours: decide on the leader's state
            else:
                self._table.apply(result.seq, item.event.schedule)
        return retry

    def _known(self, deployment_id: str) -> tuple[int, ScheduleRecord | None]:
        """The table's copy with its sequence; (0, None) when this process saw none."""
        known = self._table.get_with_seq(deployment_id)
        return (0, None) if known is None else known

    async def _leader_state(self, subject: str) -> tuple[int, ScheduleRecord | None]:
        """The subject's last sequence and its last event of ours as the stream leader has
        them (applied to the table too): a foreign message after that event is stepped over
        (jetstream/foreign.py), so the next append goes after it, decided on the event."""
        known = self._table.get_with_seq(untoken(subject.rsplit(".", 1)[-1]))
        tail = await self._store.tail(subject, schedule_event_on,
                                      known=0 if known is None else known[0])
        if tail.ours is None:
            return tail.last_seq, None
        record = schedule_event_on(subject, tail.ours.data).schedule
        self._table.apply(tail.last_seq, record)
        return tail.last_seq, record

    async def end_once(self) -> int:
        """The Schedule events' last sequence from the stream leader, asked once."""
        return await self._store.last_seq_once(self._names.schedules_stream)

    def feed(self, on_schedule: OnSchedule, *,
             on_skip: Callable[[], None] | None = None, after: int | None = None) -> Follower:
        """An ordered consumer of the Schedule events: the last of each (or, ``after`` a
        checkpoint, every one after it), then every new one."""
        def on_message(seq: int, subject: str, data: bytes) -> None:
            try:
                event = schedule_event_on(subject, data)
            except ForeignMessage:
                self._repair(subject, on_schedule)
                raise
            on_schedule(seq, event.schedule)

        return Follower(self._store, stream=self._names.schedules_stream,
                        filter_subject=self._names.schedules_filter, on_message=on_message,
                        on_skip=on_skip, from_seq=None if after is None else after + 1,
                        catch_up=after is not None, foreign=self._store.foreign)

    async def settled(self) -> None:
        """Return once the Schedules repaired after a foreign message are read again."""
        while self._repairs:
            await asyncio.gather(*self._repairs.values(), return_exceptions=True)

    def _repair(self, subject: str, on_schedule: OnSchedule) -> None:
        """A foreign message was followed on ``subject``: read the Schedule's last event of
        ours from the leader and deliver it, in the background (the feed delivered only the
        foreign one when it was the subject's last, at a start)."""
        if subject in self._repairs:
            return  # its read is on its way: it finds the newest state
        task = asyncio.get_running_loop().create_task(self._repaired(subject, on_schedule))
        self._repairs[subject] = task
        task.add_done_callback(lambda _: self._repairs.pop(subject, None))

    async def _repaired(self, subject: str, on_schedule: OnSchedule) -> None:
        try:
            async with self._repairing:
                seq, record = await self._leader_state(subject)
            if record is not None:
                on_schedule(seq, record)
        except Exception:  # the next read or write of that Schedule reads it again
            log.warning("could not read the schedule on %s after a foreign message", subject,
                        exc_info=log.isEnabledFor(logging.DEBUG))

    async def as_of(self, deployment_id: str, instant: datetime) -> ScheduleRecord | None:
        """The Schedule as its last event stored at or before ``instant`` left it.

        One read when nothing changed since (the usual case); otherwise a walk over the
        Schedule's own events, which are few (one per change, never one per firing).
        """
        subject = self._names.schedule_subject(deployment_id)
        last = await self._store.last(subject)
        if last is None:
            return None
        if last.stored_at is not None and last.stored_at <= instant:
            try:
                return schedule_event_on(subject, last.data).schedule
            except ForeignMessage:
                pass  # walk the events instead, skipping it
        state: ScheduleRecord | None = None
        seq = 1
        while (msg := await self._store.next(subject, seq)) is not None:
            if msg.stored_at is not None and msg.stored_at > instant:
                break
            with contextlib.suppress(ForeignMessage):  # not ours: the state before it stands
                state = schedule_event_on(subject, msg.data).schedule
            seq = msg.seq + 1
        return state
