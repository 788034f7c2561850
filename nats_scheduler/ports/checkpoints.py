"""Checkpoints of the Schedule table: a starting replica loads one instead of a million events.

A replica's start-up reads the last event of every Schedule, one each; a checkpoint holds
the whole table at once: every Schedule's record and the position of the event it came
from, as of position ``S`` of the Schedule journal. A replica that loads it then follows
only the events after ``S`` (``ScheduleJournal.feed(after=S)``); each Schedule's newest
event wins by its position, so the table is what the full replay would have built.

A cache, never the authority: any doubt (none written, a part missing or unreadable, a
journal made again since) and the replica reads every Schedule, as without checkpoints.
Of two replicas writing at once, one checkpoint stands.

Implementations: ``jetstream/checkpoints.py`` (a stream of parts and heads) and
``memory/checkpoints.py``; the contract suite (``tests/test_ports_contract.py``) holds both
to it. A store may keep none (``StorePorts.checkpoints`` is None): a server whose
permissions predate them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from datetime import datetime
from typing import Protocol

import msgspec

from ..core.events import Hold, ScheduleRecord
from ..seam import RunPayload

SCHEMA = 1
"""The layout of a checkpoint's rows; a head of another schema is not loaded."""


class CheckpointHead(msgspec.Struct, frozen=True, kw_only=True):
    """What a checkpoint is: its id, the position it was taken at, its size, its writer."""

    schema: int = SCHEMA
    id: str
    schedules_seq: int
    """Every Schedule event up to this position is in it."""
    schedules_created: str
    """When the Schedule journal it was taken from was created: a journal made again (its
    positions start over) makes every older checkpoint worthless."""
    parts: int
    schedules: int
    written_at: datetime
    by: str


class CheckpointRow(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One Schedule in a checkpoint: its record, flattened, and its event's position.

    Flattened, not the record itself: an array without field names is a third of the
    record's size, and a checkpoint's layout is its own (``SCHEMA``), apart from the
    events' JSON."""

    seq: int
    deployment_id: str
    name: str | None
    """None when it equals the deployment ID (most do): not stored twice."""
    cron: str
    timezone: str
    enabled: bool
    target: str
    prompt: str
    version: int
    deleted: bool
    updated_at: datetime
    hold: Hold | None = None

    @classmethod
    def of(cls, seq: int, record: ScheduleRecord) -> CheckpointRow:
        payload = record.payload
        return cls(seq, record.deployment_id,
                   None if record.name == record.deployment_id else record.name,
                   record.cron, record.timezone, record.enabled, payload.target,
                   payload.prompt, record.version, record.deleted, record.updated_at,
                   record.hold)

    def record(self) -> ScheduleRecord:
        return ScheduleRecord(
            deployment_id=self.deployment_id, name=self.name or self.deployment_id,
            cron=self.cron, timezone=self.timezone, enabled=self.enabled,
            payload=RunPayload(self.target, self.prompt), version=self.version,
            deleted=self.deleted, hold=self.hold, updated_at=self.updated_at)


class CheckpointUnusable(Exception):
    """A checkpoint that cannot be loaded whole (a part missing or not readable)."""


class Entry(Protocol):
    """One Schedule as the table holds it (``ScheduleTable.entries``)."""

    @property
    def seq(self) -> int: ...

    @property
    def record(self) -> ScheduleRecord: ...


class TableCheckpoints(Protocol):
    """Write a checkpoint of the Schedule table; find and read the newest one."""

    async def latest(self) -> tuple[int, CheckpointHead] | None:
        """The newest checkpoint's head with its own position (None: none usable)."""
        ...

    def rows(self, head: CheckpointHead) -> AsyncGenerator[list[CheckpointRow], None]:
        """Its rows, a part at a time, in order; CheckpointUnusable when a part is missing
        or not readable, or they are not as many as the head says."""
        ...

    async def write(self, entries: Sequence[Entry], *, schedules_seq: int,
                    schedules_created: str, previous: int, by: str,
                    now: datetime) -> CheckpointHead | None:
        """Store ``entries`` (the whole table, taken when it held every event up to
        ``schedules_seq``) as the newest checkpoint; None when another writer's checkpoint
        came after the head at ``previous`` (0: none), this one's parts then gone."""
        ...

    async def journal_created(self) -> str:
        """When the Schedule journal was created (the store's word)."""
        ...
