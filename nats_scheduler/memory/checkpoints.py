"""Checkpoints of the Schedule table in memory (the contract:
:mod:`nats_scheduler.ports.checkpoints`).

As the JetStream stream keeps them (``jetstream/checkpoints.py``): a checkpoint's parts are
stored one at a time, then its head, appended only while the newest head is still the one
its writer read (``previous``), so of two writers at once one checkpoint stands and the
other's parts are dropped; the winner drops every older checkpoint. Every step is an
operation of the store: a store that is down fails it, retried for the retry budget.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from datetime import datetime

from ..ports.checkpoints import CheckpointHead, CheckpointRow, CheckpointUnusable, Entry
from .retry import retrying
from .store import Foreign, MemoryStore

PART_ROWS = 1_000
"""Rows per part (a part is one operation)."""


class MemoryCheckpoints:
    """The checkpoints port over a :class:`~.store.MemoryStore`."""

    def __init__(self, store: MemoryStore, *, retry_seconds: float) -> None:
        self._store = store
        self._shelf = store.checkpoints
        self._retry_seconds = retry_seconds

    async def _operation(self, what: str) -> None:
        await retrying(what, self._store.operation, self._retry_seconds)

    async def journal_created(self) -> str:
        await self._operation("could not read the schedules")
        return self._store.created

    async def latest(self) -> tuple[int, CheckpointHead] | None:
        await self._operation("could not read a checkpoint")
        ours = [(seq, head) for seq, head in self._shelf.heads
                if not isinstance(head, Foreign)]  # a foreign one is skipped
        return ours[-1] if ours else None

    async def rows(self, head: CheckpointHead) -> AsyncGenerator[list[CheckpointRow], None]:
        count = 0
        for index in range(head.parts):
            await self._operation("could not read a checkpoint")
            parts = self._shelf.parts.get(head.id, [])
            if index >= len(parts):
                raise CheckpointUnusable(f"part {index + 1} of {head.parts} is missing")
            rows = list(parts[index])
            count += len(rows)
            yield rows
        if count != head.schedules:
            raise CheckpointUnusable(f"{count} Schedules where its head says {head.schedules}")

    async def write(self, entries: Sequence[Entry], *, schedules_seq: int,
                    schedules_created: str, previous: int, by: str,
                    now: datetime) -> CheckpointHead | None:
        shelf = self._shelf
        shelf.begun += 1
        checkpoint_id = f"{shelf.begun:016x}"
        parts = shelf.parts.setdefault(checkpoint_id, [])
        try:
            for start in range(0, len(entries), PART_ROWS):
                await self._operation("could not write a checkpoint")
                parts.append([CheckpointRow.of(e.seq, e.record)
                              for e in entries[start:start + PART_ROWS]])
            await self._operation("could not write a checkpoint")
        except BaseException:
            shelf.parts.pop(checkpoint_id, None)
            raise
        ours = [seq for seq, head in shelf.heads if not isinstance(head, Foreign)]
        newest = ours[-1] if ours else 0  # written after any foreign one, as JetStream's
        if newest != previous:  # another writer's head came after the one read
            shelf.parts.pop(checkpoint_id, None)
            return None
        head = CheckpointHead(id=checkpoint_id, schedules_seq=schedules_seq,
                              schedules_created=schedules_created, parts=len(parts),
                              schedules=len(entries), written_at=now, by=by)
        shelf.seq += 1
        shelf.heads = [(shelf.seq, head)]  # the older heads and their parts are dropped
        shelf.parts = {checkpoint_id: parts}
        return head
