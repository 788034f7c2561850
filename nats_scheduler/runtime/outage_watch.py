"""Record the outage a replica's start ends: one write per outage, none otherwise.

Due times that pass while no provider process runs are skipped by the rules; so that the
account of due times can say so later (``core/dueaccount.py``, ``no_process``), the first
replica to start after such a span appends one ``outage.recorded``
(``jetstream/outages.py``). Nothing here runs on the firing path or per due time:

1. :meth:`OutageWatch.before_start` reads, before this process stores anything, the
   newest write each of the provider's streams ever stored (one request per stream);
2. :meth:`OutageWatch.after_join`, in the background once the replica joined the live
   ones and knows the store's clock, waits until every live replica has beaten since it
   joined (``SETTLE_SECONDS``), reads the replicas bucket and the newest record, and
   decides (``core/liveness.py``); an outage is appended conditionally on the newest
   record, so of several replicas starting together one records it. It also counts the
   outage's skipped due times (``astrabox.scheduler.due_times.skipped``, ``no_process``).

Only a replica that decides by the store's clock records (``ServerClock`` with an
estimate): a replica driven by a hand-moved clock (tests) or alone without the replicas
bucket cannot date its start on the server's clock, and records nothing.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from ..clock import Clock, ServerClock, sleep_for
from ..core.dueaccount import Outage
from ..core.events import OutageRecorded
from ..core.liveness import LastRecord, Sign, outage_before, skipped_during
from ..jetstream.errors import Conflict
from ..jetstream.outages import LastWrite, OutageLog
from ..names import Names
from ..projections.schedule_table import ScheduleTable
from .metrics import Metrics

log = logging.getLogger(__name__)

SETTLE_SECONDS = 4.0
"""Seconds after its start a replica waits before judging who ran across it: three beats
(the presence window) and one more, so every replica alive then has put its key since."""

RACES = 3
"""Times a replica decides again after another one appended a record first."""

ATTEMPTS = 5
"""Times a start asks for the stream, and tries to record, before it gives up: 1, 2, 4 and
8 s apart. At a million Schedules the replica's own event loop is busy loading them when it
joins, and its first requests were not answered within their time-outs: asked once, the
start recorded nothing (bench/scale.py logged it)."""

BACKOFF_SECONDS = 1.0
"""The first wait between attempts; each next one doubles."""

ESTIMATE_PATIENCE = 30.0
"""Seconds a start waits for a fresh estimate of the store's clock before giving up."""


def _what(names: Names, write: LastWrite) -> str:
    """A stream's newest write, in the record's words."""
    return {
        names.schedules_stream: "the last Schedule change",
        names.runs_stream: "the last Run event",
        names.index_stream: "the last history entry",
        names.leases_stream: "the last lease write",
        names.replicas_stream: "the last replica beat or leave",
        names.outages_stream: "the last outage record",
    }.get(write.stream, f"the last write to {write.stream}")


class OutageWatch:
    """The outage record of one replica's start (at most one write)."""

    def __init__(self, log_: OutageLog, names: Names, *, identity: str, clock: Clock,
                 table: ScheduleTable, metrics: Metrics) -> None:
        self._log = log_
        self._names = names
        self._identity = identity
        self._own_key = names.replica_key(identity)
        self._clock = clock
        self._table = table
        self._metrics = metrics
        self._signs: list[Sign] | None = None
        self.recorded: Outage | None = None
        """The outage this replica recorded, if it did (tests and the log read it)."""
        self.decided = asyncio.Event()
        """Set once :meth:`after_join` has decided (recorded, or nothing to record)."""

    async def before_start(self) -> None:
        """Note the newest write of every stream before this process writes anything."""
        try:
            writes = await self._log.last_writes()
        except Exception as exc:
            log.warning("could not read the store's last writes (%s): this start records "
                        "no outage", exc)
            return
        self._signs = [Sign(w.at, _what(self._names, w)) for w in writes]

    def _start(self, mark: float) -> datetime | None:
        """The latest the store's clock can have read at ``mark`` (this process's start): the
        lower bound of its estimate plus its width. A replica that left just before this one
        started is then never taken for one that ran across the start."""
        clock = self._clock
        if not isinstance(clock, ServerClock):
            return None
        estimate = clock.estimate()
        if estimate is None:
            return None
        return clock.at(mark) + timedelta(seconds=estimate.width)

    async def _began(self, mark: float) -> datetime | None:
        """:meth:`_start` once the clock has a fresh estimate: a busy process's first beat
        can come after the settling wait, and deciding without it would silently record
        nothing (the estimate is also tighter now than at the join)."""
        deadline = self._clock.now() + timedelta(seconds=ESTIMATE_PATIENCE)
        while (began := self._start(mark)) is None and self._clock.now() < deadline:
            await sleep_for(self._clock, 0.25)
        return began

    async def after_join(self, began_mark: float | None) -> Outage | None:
        """Record the outage ending at this replica's start (``began_mark``, on its elapsed
        time: ``ServerClock.mark``), if there was one."""
        try:
            return await self._after_join(began_mark)
        finally:
            self.decided.set()

    async def _after_join(self, began_mark: float | None) -> Outage | None:
        if (self._signs is None or began_mark is None
                or not isinstance(self._clock, ServerClock)):
            return None
        # at once: outages are recorded from the stream's creation on (the account's floor)
        for attempt in range(ATTEMPTS):
            last = attempt == ATTEMPTS - 1
            if await self._log.ensure(warn=last):
                break
            if last:
                return None
            await sleep_for(self._clock, BACKOFF_SECONDS * 2 ** attempt)
        await sleep_for(self._clock, SETTLE_SECONDS)
        began = await self._began(began_mark)
        if began is None:
            log.warning("this start records no outage: no estimate of the store's clock in "
                        "%.0f s (the presence beat stored nothing)", ESTIMATE_PATIENCE)
            return None
        outage = await self._record_patiently(began)
        if outage is not None:
            self.recorded = outage
            skipped = skipped_during(self._table.all(), outage)
            self._metrics.due_times_skipped("no_process", skipped)
            log.warning("no scheduler process ran from %s to %s (%s): %d due times were "
                        "skipped, recorded", outage.start.isoformat(), began.isoformat(),
                        outage.evidence, skipped)
        return outage

    async def _record_patiently(self, began: datetime) -> Outage | None:
        """:meth:`_record`, asked again on a failure (a time-out of a busy loop): safe, for a
        record that was stored although its answer was lost is read back by the next try,
        which then finds the outage recorded."""
        for attempt in range(ATTEMPTS):
            try:
                return await self._record(began)
            except Exception as exc:
                if attempt == ATTEMPTS - 1:
                    log.warning("could not record the outage before this start (%s)",
                                str(exc) or type(exc).__name__)
                    return None
                await sleep_for(self._clock, BACKOFF_SECONDS * 2 ** attempt)
        return None

    async def _record(self, began: datetime) -> Outage | None:
        assert self._signs is not None
        seen_now = await self._log.replicas_seen()
        peers = [peer for key, peer in seen_now.items() if key != self._own_key]
        mine = seen_now.get(self._own_key)
        # replicas starting together: the first by (started_at, name) records (liveness.py)
        own = ((mine.started_at, mine.name)
               if mine is not None and mine.started_at is not None else None)
        for _ in range(RACES):
            seq, last = await self._log.last()
            stored = None if last is None else LastRecord(last.event.start, last.event.end,
                                                          last.stored_at)
            outage = outage_before(began, self._signs, peers, stored, own)
            if outage is None:
                return None
            event = OutageRecorded(at=self._clock.now(), actor=self._identity,
                                   start=outage.start, end=began, evidence=outage.evidence)
            try:
                await self._log.append(event, seq)
            except Conflict:
                continue  # another replica recorded first: decide again on its record
            return outage
        return None
