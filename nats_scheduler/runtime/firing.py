"""Firing a due time: store its Run so that a paused Schedule stops within a known bound.

The seam promises that after ``apply(enabled=False)`` returns, no scheduled Run starts later
than ``pause_visibility_seconds``. Two halves keep that promise (docs/architecture.md,
"Firing and pause visibility"):

1. **Fresh read, bounded send** (:meth:`Firing.fire_due`). Right before the create, the
   Schedule is read from the stream leader; the create leaves only while that read is younger
   than :data:`FIRE_READ_MAX_AGE`, and never while disconnected (the client would buffer it
   and send it after reconnecting, maybe long after a pause it could not see). An older read
   is done again.
2. **A gate before the first claim** (:class:`.gate.PauseGate`). A create can still reach
   the store late (a process frozen between its read and the socket write). The dispatcher
   asks the gate before it first claims a scheduled Run; a Run stored after its Schedule
   stopped firing, judged on the server's timestamps, is recorded FAILED and never started.

The uniqueness of a Run per due time is the store's: the create is conditional on the Run's
subject being empty and carries ``<deployment>@<due time>`` as its Msg-Id.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from ..clock import Clock
from ..core import calendar, runcore, validation
from ..core.events import RunCreated, RunRecord, ScheduleRecord
from ..core.pause_visibility import FIRE_READ_MAX_AGE, PAUSE_VISIBILITY_SECONDS
from ..names import (
    enqueued_create_msg_id,
    random_run_id,
    requested_create_msg_id,
    requested_run_id,
    scheduled_create_msg_id,
    scheduled_run_id,
)
from ..ports import StorePorts
from ..ports.leases import Claimed, Lease, LeaseTable
from ..ports.runs import Announcement, RunJournal, Stored
from ..ports.schedules import ScheduleJournal
from ..projections.schedule_table import ScheduleTable
from ..seam import EnqueueRequest, InvalidSchedule, RunPayload, SchedulerUnavailable, Trigger
from .dispatcher import Dispatcher
from .freshness import Freshness
from .metrics import Metrics

log = logging.getLogger(__name__)


FIRE_BATCH = 256
"""Due times stored per pipelined batch by :meth:`Firing.fire_many`."""

ONE_BY_ONE_CONCURRENCY = 32
"""Due times a batch hands back to :meth:`Firing.fire_due` are fired this many at a time."""

CONFIRMATION_REUSE = 0.05
"""Seconds one confirmation of the Schedule table serves the firings that follow it."""


_run_id = functools.lru_cache(maxsize=16 * FIRE_BATCH)(scheduled_run_id)
"""The Run ID of a due time (a digest), remembered: a firing needs it for the announcement
and again for the create."""

_is_due_time = functools.lru_cache(maxsize=4096)(calendar.is_due_time)
"""Whether an instant is a due time of a calendar, remembered: a batch checks each of its due
times against the Schedule it reads (its calendar may have changed since the ticker planned
it), and the Schedules of a busy minute mostly share a few calendars (``0 * * * *``)."""


class _Plan(NamedTuple):
    """A due time of a batch whose Schedule the table holds active and due then."""

    record: ScheduleRecord
    due: datetime


class _Ready(NamedTuple):
    """A due time of a batch that is announced and waits for its create."""

    record: ScheduleRecord
    due: datetime
    announced: Announcement


class _StaleRead(Exception):
    """The Schedule read behind a firing aged past ``FIRE_READ_MAX_AGE`` before the create."""


@dataclass(kw_only=True, eq=False)
class Firing:
    """Stores the Run of each due time fired on this process (and of each Run now).

    Each Run this process stored, or opened the key of, goes to ``dispatcher`` (a repeat
    that found its Run ended only closes the key it opened). ``freshness`` proves the
    Schedule table current for many firings with one leader read (:mod:`.freshness`); without
    it (or when it cannot prove it) each firing reads its Schedule from the leader.
    """

    store: StorePorts
    schedules: ScheduleJournal
    runs: RunJournal
    clock: Clock
    identity: str
    dispatcher: Dispatcher
    leases: LeaseTable
    table: ScheduleTable | None = None
    freshness: Freshness | None = None
    metrics: Metrics = field(default_factory=Metrics.disabled)
    stale_fires: int = field(default=0, init=False)
    """Firings whose Schedule read aged before the create and was done again."""
    _closing: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    async def fire_due(self, deployment_id: str, due_at: datetime) -> RunRecord | None:
        """Store the Run of one due time (the ticker's single code path).

        Returns the Run (also when another process stored it first), None when the Schedule
        is unknown, deleted, disabled or held at ``due_at`` (a hold whose end came by then
        no longer counts); InvalidSchedule when ``due_at`` is not one of its due times.
        """
        due = validation.utc(due_at, "due_at")
        if not validation.usable_id(deployment_id):
            return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.store.retry_seconds
        delay = 0.05
        announced: Announcement | None = None
        while True:
            read_at, record = await self._read(deployment_id)
            if record is None or not record.fires_at(due):
                return None
            if not calendar.is_due_time(record.cron, record.timezone, due):
                raise InvalidSchedule(
                    f"{due.isoformat()} is not a due time of deployment {deployment_id!r}"
                )
            if announced is None:
                # Once: its history entry and open key, before the create. Then read again,
                # so the create leaves within FIRE_READ_MAX_AGE of a read even when the
                # announce waited on a busy store.
                # Stamped now (not at the read): the entry's key, which the Run takes.
                announced = await self.runs.announce(
                    self._event(record, due, self.clock.now()).run)
                continue
            # Past the deadline a busy process still fires (liveness): the create may then
            # leave on an older read, and the gate checks such a Run against the Schedule
            # as it stood when the Run was stored.
            fresh_only = loop.time() < deadline
            try:
                return await self._create(record, due, read_at, fresh_only=fresh_only,
                                          announced=announced)
            except _StaleRead:
                self.stale_fires += 1
                self.metrics.stale_fire_read()
                log.info("schedule read for %s aged before the create; reading again",
                         deployment_id)
            except SchedulerUnavailable:
                if loop.time() + delay > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def _read(self, deployment_id: str) -> tuple[datetime, ScheduleRecord | None]:
        """The Schedule as it stood at the returned instant: from the table when one shared
        confirmation proves it current, else from the stream leader."""
        if self.freshness is not None and self.table is not None:
            proven = await self.freshness.confirm(reuse=CONFIRMATION_REUSE)
            if proven is not None:
                return proven, self.table.get(deployment_id)
        read_at = self.clock.now()
        return read_at, await self.schedules.read(deployment_id)

    async def _create(
        self, record: ScheduleRecord, due: datetime, read_at: datetime, *, fresh_only: bool,
        announced: Announcement,
    ) -> RunRecord:
        """Send the create of a scheduled Run once, if the Schedule read is still fresh.

        With ``fresh_only=False`` (the firing's retry time is used up) it is sent anyway and
        the Run is left for the gate. It is sent once (no store-level retry): a retry reads
        the Schedule again first, so no create leaves on a stale read.
        """
        now = self.clock.now()
        if fresh_only and (now - read_at).total_seconds() > FIRE_READ_MAX_AGE:
            raise _StaleRead()
        if not self.store.connected:
            raise SchedulerUnavailable("the scheduler store is unavailable: not connected")
        lease = announced.lease
        event = runcore.indexed(self._event(record, due, now, claimed=lease is not None),
                                announced.index_seq, announced.created_at)
        stored = await self.runs.create(
            event, msg_id=scheduled_create_msg_id(record.deployment_id, due), retry_seconds=0
        )
        self._settle(stored, lease, read_at)
        return stored.run

    def _settle(self, stored: Stored, lease: Lease | None, read_at: datetime) -> None:
        """Hand a scheduled Run this process stored, or holds the key of, to the dispatcher."""
        if not (stored.created or lease is not None):
            return
        # Acknowledged within the bound of the read: stored within it too, so the gate need
        # not look at it. (Stored by another replica but announced by this one: this one
        # holds its lease, so it dispatches it; the gate then looks.)
        acked = self.clock.now()
        if stored.created and stored.run.due_at is not None:
            self.metrics.fire_lateness("stored", stored.run.due_at, acked)
        vetted = stored.created and (acked - read_at).total_seconds() <= PAUSE_VISIBILITY_SECONDS
        self._hand_over(stored, lease, vetted=vetted)

    def _hand_over(self, stored: Stored, lease: Lease | None, *, vetted: bool) -> None:
        """The Run to the dispatcher, with the lease this process opened for it (if any)."""
        if not (stored.created or lease is not None):
            return
        run = stored.run
        if stored.created:
            self.metrics.run_created(run.trigger)
        claimed = None if lease is None else Claimed(lease, stored.seq, run)
        if not run.finished:
            self.dispatcher.submit(run.run_id, vetted=vetted, claimed=claimed)
        elif lease is not None:  # a repeat announced a Run that had ended: close its key
            task = asyncio.create_task(self.leases.release(lease, finished=True))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def store_requested(self, request: EnqueueRequest, payload: RunPayload, *,
                              reason: str | None = None,
                              on_behalf_of: str | None = None) -> RunRecord:
        """Store a Run asked for (Run now, Replay) the way a due time's is: announced, created,
        handed to the dispatcher with the lease the announcement opened. No Schedule read to
        keep fresh: the gate only judges scheduled Runs. A request ID makes the Run ID (and
        so a repeated request finds the first one's Run, which is returned)."""
        if request.request_id is not None:
            run_id = requested_run_id(request.deployment_id, request.request_id)
            msg_id = requested_create_msg_id(run_id)
        else:
            run_id = random_run_id()
            msg_id = enqueued_create_msg_id(run_id)
        event = runcore.create(
            run_id=run_id, deployment_id=request.deployment_id, trigger=request.trigger,
            due_at=None, payload=payload, now=self.clock.now(), actor=self.identity,
            replay_of=request.replay_of, requested_by=request.requested_by, reason=reason,
            on_behalf_of=on_behalf_of,
        )
        announced = await self.runs.announce(event.run)
        stored = await self.runs.create(
            runcore.indexed(event, announced.index_seq, announced.created_at), msg_id=msg_id)
        self._hand_over(stored, announced.lease, vetted=False)
        return stored.run

    # ------------------------------------------------------------------ many due times

    async def fire_many(self, due_times: Sequence[tuple[str, datetime]]) -> int:
        """Store the Runs of many due times: the ticker's path when Schedules share a minute.

        The protocol of :meth:`fire_due`, a batch at a time: one confirmation of the Schedule
        table for the whole batch, the announcements and the creates each sent as one
        atomic batch (jetstream/acks.py; split into pipelined publishes when one item
        races), every create leaving within
        ``FIRE_READ_MAX_AGE`` of a confirmation. Whatever a batch cannot settle (no
        confirmation, a store error on one item) goes through :meth:`fire_due` one by one.
        Returns how many due times were handled.
        """
        for start in range(0, len(due_times), FIRE_BATCH):
            batch = due_times[start:start + FIRE_BATCH]
            try:
                await self._fire_batch(batch)
            except Exception:
                # Nothing of a batch is lost to an error outside its items (the connection
                # closing under the pipelined publisher): every step is idempotent, so the
                # whole batch goes through fire_due, with its retries.
                log.warning("a batch of %d due times failed; firing them one by one",
                            len(batch), exc_info=True)
                await self._one_by_one(batch)
        return len(due_times)

    async def _fire_batch(self, due_times: Sequence[tuple[str, datetime]]) -> None:
        if self.freshness is None or self.table is None:
            await self._one_by_one(due_times)
            return
        proven = await self.freshness.confirm(reuse=CONFIRMATION_REUSE)
        if proven is None:
            await self._one_by_one(due_times)
            return
        plans = self._plans(due_times)
        stamped = self.clock.now()  # the entries' earliest key, which the Runs take
        announced = await self.runs.announce_many(
            [self._event(plan.record, plan.due, stamped).run for plan in plans])
        leftovers = [(plan.record.deployment_id, plan.due) for plan, outcome
                     in zip(plans, announced, strict=True) if isinstance(outcome, Exception)]
        ready = [_Ready(plan.record, plan.due, outcome) for plan, outcome
                 in zip(plans, announced, strict=True) if not isinstance(outcome, Exception)]
        deadline = asyncio.get_running_loop().time() + self.store.retry_seconds
        while ready:
            proven = await self.freshness.confirm(reuse=CONFIRMATION_REUSE)
            if (proven is None or not self.store.connected
                    or asyncio.get_running_loop().time() > deadline):
                leftovers += [(item.record.deployment_id, item.due) for item in ready]
                break
            # as the table stands now: a Schedule paused meanwhile is left out (its
            # announcement stays unstored, which reads skip)
            ready = self._still_planned(ready)
            now = self.clock.now()
            if (now - proven).total_seconds() > FIRE_READ_MAX_AGE:
                self.stale_fires += 1
                self.metrics.stale_fire_read()
                continue
            await self._create_batch(ready, proven, now, leftovers)
            break
        if leftovers:
            await self._one_by_one(leftovers)

    async def _create_batch(
        self, ready: list[_Ready], read_at: datetime, now: datetime,
        leftovers: list[tuple[str, datetime]],
    ) -> None:
        events = [runcore.indexed(self._event(item.record, item.due, now,
                                              claimed=item.announced.lease is not None),
                                  item.announced.index_seq, item.announced.created_at)
                  for item in ready]
        msg_ids = [scheduled_create_msg_id(item.record.deployment_id, item.due)
                   for item in ready]
        def still_fresh() -> bool:
            """Whether a create decided on the confirmation at ``read_at`` may still leave
            (a batch refused as a whole is sent again one by one only then)."""
            return (self.store.connected and (self.clock.now() - read_at).total_seconds()
                    <= FIRE_READ_MAX_AGE)

        results = await self.runs.create_many(events, msg_ids, still_fresh=still_fresh)
        for item, result in zip(ready, results, strict=True):
            if isinstance(result, Exception):
                leftovers.append((item.record.deployment_id, item.due))
                continue
            self._settle(result, item.announced.lease, read_at)

    def _plans(self, due_times: Sequence[tuple[str, datetime]]) -> list[_Plan]:
        """The due times whose Schedule is active and still has them, from the table."""
        assert self.table is not None
        plans = []
        for deployment_id, due in due_times:
            record = self.table.get(deployment_id)
            if record is None or not record.fires_at(due):
                continue
            if not _is_due_time(record.cron, record.timezone, due):
                continue  # its calendar changed since the ticker planned it
            plans.append(_Plan(record, due))
        return plans

    def _still_planned(self, ready: list[_Ready]) -> list[_Ready]:
        """``ready`` as the table stands now: a Schedule changed since it was planned is
        planned again (paused: left out; its calendar changed: checked again). The table
        hands out the same record until its Schedule changes, so the unchanged ones (all of
        them, but for a change in the last milliseconds) cost a lookup each."""
        assert self.table is not None
        kept = []
        for item in ready:
            current = self.table.get(item.record.deployment_id)
            if current is None:
                continue  # deleted meanwhile
            if current is not item.record and not (
                    current.fires_at(item.due)
                    and _is_due_time(current.cron, current.timezone, item.due)):
                continue
            kept.append(item._replace(record=current))
        return kept

    async def _one_by_one(self, due_times: Sequence[tuple[str, datetime]]) -> None:
        """:meth:`fire_due` for each, a few at a time; failures are logged, not raised."""
        limit = asyncio.Semaphore(ONE_BY_ONE_CONCURRENCY)

        async def one(deployment_id: str, due: datetime) -> None:
            async with limit:
                try:
                    await self.fire_due(deployment_id, due)
                except Exception:
                    log.exception("firing %s at %s failed", deployment_id, due.isoformat())

        await asyncio.gather(*(one(deployment_id, due) for deployment_id, due in due_times))

    def _event(self, record: ScheduleRecord, due: datetime, now: datetime, *,
               claimed: bool = False) -> RunCreated:
        """The create of a due time's Run; ``claimed``: this process holds its key, so the
        create carries its claim (no ``run.claimed`` follows)."""
        return runcore.create(
            run_id=_run_id(record.deployment_id, due),
            deployment_id=record.deployment_id, trigger=Trigger.SCHEDULE, due_at=due,
            payload=record.payload, now=now, actor=self.identity,
            holder=self.identity if claimed else None,
        )
