"""When a replica loads a checkpoint of the Schedule table, and when one writes a new one.

At start (:meth:`Checkpointing.load`) a replica loads the newest checkpoint into its
Schedule table, when it is usable (``ports/checkpoints.py``), and says after which Schedule
event its feed goes on; otherwise the feed replays every Schedule's last event, as before
checkpoints.

Now and then (:meth:`Checkpointing.forever`) the replica that owns the job among the live
ones (``runtime/membership.py``, as the retention) writes a new one, once its table is
loaded, when the table is large enough for a checkpoint to pay (``MIN_SCHEDULES``) and the
newest checkpoint is missing, old, or behind by more events than a tenth of the Schedules
(a replay of those after it stays a small part of the start-up). Writing one at a million
Schedules is about a second of this replica's CPU, a part at a time, and 110 MB stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import timedelta

from ..clock import Clock, sleep_for
from ..ports.checkpoints import TableCheckpoints
from ..projections.schedule_table import ScheduleTable

log = logging.getLogger(__name__)

MIN_SCHEDULES = 20_000
"""Smaller tables are not checkpointed: their replay takes about a second at most."""

BEHIND_SHARE = 10
"""A checkpoint is written again once more events than one Schedule in this many came
after it (the replay after a checkpoint stays a tenth of a full one)."""

CHECK_SECONDS = 60.0
"""How often the owner of the job looks whether a checkpoint is due."""

JOB = "schedule-table-checkpoint"
"""The ownership key of the job among the live replicas."""

REWRITE_AFTER = timedelta(days=3.5)
"""A checkpoint older than this is written again, changes or not: a store may age old ones
out (the JetStream stream keeps them 7 days)."""


class Checkpointing:
    """Load the newest checkpoint at start; write a new one when it is due."""

    def __init__(self, checkpoints: TableCheckpoints | None, table: ScheduleTable, *,
                 position: Callable[[], int], ready: Callable[[], bool],
                 owns: Callable[[str], bool], clock: Clock, identity: str) -> None:
        self._checkpoints = checkpoints
        self._table = table
        self._position = position
        self._ready = ready
        self._owns = owns
        self._clock = clock
        self._identity = identity
        self.enabled = checkpoints is not None
        """False when the store keeps no checkpoints for this scheduler (permissions that
        predate them): none is written (nor loaded)."""
        self.loaded: int | None = None
        """The Schedules the start-up loaded from a checkpoint (None: it replayed them)."""
        self.written = 0
        """Checkpoints this replica wrote."""
        self._writing = asyncio.Lock()
        """One write at a time in this process (each reads the newest head it writes on)."""

    async def load(self, last_seq: int) -> int | None:
        """Load the newest usable checkpoint into the table; the Schedule event sequence the
        follower must go on after, or None (then it replays every Schedule's last event).

        ``last_seq``: the Schedule stream's last sequence now. Never raises: a checkpoint
        that cannot be used is logged and the replay does what it always did (the rows it
        applied are stored events, so the replay only takes the table further)."""
        checkpoints = self._checkpoints
        if checkpoints is None:
            return None
        try:
            latest = await checkpoints.latest()
            if latest is None:
                return None
            _, head = latest
            created = await checkpoints.journal_created()
            if head.schedules_created != created or head.schedules_seq > last_seq:
                log.info("the newest checkpoint is of another Schedule stream; replaying")
                return None
            if last_seq - head.schedules_seq > head.schedules:
                return None  # more events since it than it holds: replaying costs less
            table, loaded = self._table, 0
            async with contextlib.aclosing(checkpoints.rows(head)) as parts:
                async for rows in parts:  # closed at once on an error: no reads left over
                    table.load_rows(rows)
                    loaded += len(rows)
                    await asyncio.sleep(0)
        except Exception as exc:  # CheckpointUnusable, or the store's trouble
            log.warning("could not load the newest checkpoint of the Schedules (%s); "
                        "reading every Schedule instead", str(exc) or type(exc).__name__)
            return None
        self.loaded = loaded
        return head.schedules_seq

    async def forever(self, interval: float = CHECK_SECONDS) -> None:
        """Every ``interval`` seconds: write a checkpoint if this replica owns the job and
        one is due (a failure is logged; the next look tries again)."""
        while True:
            await sleep_for(self._clock, interval)
            if not (self.enabled and self._checkpoints is not None and self._ready()
                    and self._owns(JOB)):
                continue
            try:
                await self.write_if_due()
            except Exception:
                log.warning("could not write a checkpoint of the Schedules", exc_info=True)

    async def write_if_due(self, *, min_schedules: int = MIN_SCHEDULES) -> bool:
        """Write a checkpoint if one is due (see the module docstring); whether it did."""
        async with self._writing:
            return await self._write_if_due(min_schedules)

    async def _write_if_due(self, min_schedules: int) -> bool:
        count = len(self._table)
        if count < min_schedules or self._checkpoints is None:
            return False
        latest = await self._checkpoints.latest()
        previous = 0 if latest is None else latest[0]
        if latest is not None:
            head = latest[1]
            behind = self._position() - head.schedules_seq
            age = self._clock.now() - head.written_at
            if behind <= count // BEHIND_SHARE and age < REWRITE_AFTER:
                return False
        return await self._write(previous)

    async def write_now(self) -> bool:
        """Write a checkpoint now, due or not; whether it became the newest."""
        async with self._writing:
            latest = None if self._checkpoints is None else await self._checkpoints.latest()
            return await self._write(0 if latest is None else latest[0])

    async def write(self, previous: int) -> bool:
        """Write a checkpoint of the table now on the head at ``previous`` (0: none);
        whether it became the newest."""
        async with self._writing:
            return await self._write(previous)

    async def _write(self, previous: int) -> bool:
        checkpoints = self._checkpoints
        if checkpoints is None:
            return False
        created = await checkpoints.journal_created()
        # Taken in one step: every event up to ``seq`` is in the table (a record newer than
        # ``seq``, a change this replica stored, is delivered again after it and ignored).
        seq, entries = self._position(), self._table.entries()
        head = await checkpoints.write(
            entries, schedules_seq=seq, schedules_created=created, previous=previous,
            by=self._identity, now=self._clock.now())
        if head is not None:
            self.written += 1
            log.info("wrote a checkpoint of %d Schedules as of event %d", len(entries), seq)
        return head is not None
