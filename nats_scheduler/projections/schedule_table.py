"""The Schedule table: a projection of the Schedule events (latest state per deployment).

The ticker plans from it and reconcile compares against it. It is a plan, not the
authority: ``fire_due`` re-reads the Schedule from the store before it stores a Run, so a
stale table can delay a firing but never make a disabled Schedule fire.

It holds one entry per Schedule ever applied, a million of them on a large platform, so
what an entry costs is counted (docs/benchmarks.md, "A restart at 100,000 Schedules"): an entry is a
small struct the garbage collector never walks (``gc=False``, as are the records), and the
values many Schedules repeat (calendar, time zone, target, payload, the instant a reconcile
stamped them with) are shared between records instead of each record keeping the copy it
was decoded with.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import TypeVar

import msgspec

from ..core.events import ScheduleRecord
from ..ports.checkpoints import CheckpointRow
from ..seam import RunPayload

Listener = Callable[[ScheduleRecord], None]
ChangeListener = Callable[[ScheduleRecord | None, ScheduleRecord], None]
"""Told of every record taken, with the one it replaced (None: the first of its Schedule)."""

SHARED_TEXTS = 20_000
"""At most this many distinct values of each shared kind (texts, payloads, instants) are
shared between records (beyond it, new ones are kept as decoded: a pool never grows with
unique values)."""

_H = TypeVar("_H", bound=Hashable)


class TableEntry(msgspec.Struct, frozen=True, gc=False):
    """One Schedule as the table holds it: its record and the stream sequence of the event
    it came from. A struct without garbage-collector bookkeeping, not a tuple: 24 bytes
    less per Schedule, and nothing for the collector to walk (it cannot be in a cycle)."""

    seq: int
    record: ScheduleRecord


class _Pool:
    """Equal values shared: the first one kept stands for every later equal one."""

    def __init__(self) -> None:
        self._values: dict[Hashable, Hashable] = {}

    def share(self, value: _H) -> _H:
        found = self._values.get(value)
        if found is None:
            if len(self._values) < SHARED_TEXTS:
                self._values[value] = value
            return value
        return found  # type: ignore[return-value]

    def sharer(self) -> Callable[[_H], _H]:
        """:meth:`share` as one function for a bulk load (no method lookup per value)."""
        values, get = self._values, self._values.get

        def share(value: _H) -> _H:
            found = get(value)
            if found is None:
                if len(values) < SHARED_TEXTS:
                    values[value] = value
                return value
            return found  # type: ignore[no-any-return]

        return share


class ScheduleTable:
    """Latest state of every Schedule ever applied (deleted ones included)."""

    def __init__(self) -> None:
        self._entries: dict[str, TableEntry] = {}
        self._listeners: list[Listener] = []
        self._change_listeners: list[ChangeListener] = []
        self._enabled = 0
        self._live = 0
        self._texts = _Pool()
        self._payloads = _Pool()
        self._instants = _Pool()
        self._ordered: list[str] | None = None
        """Every deployment ID in order, once someone listed them (IDs are never removed:
        deleted Schedules stay); new ones are appended and sorted in at the next listing."""
        self._unsorted = False

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def subscribe_changes(self, listener: ChangeListener) -> None:
        """Be told of every record taken with the one it replaced (state counts need both;
        keeping a state per Schedule of their own would cost another entry each)."""
        self._change_listeners.append(listener)

    def apply(self, seq: int, record: ScheduleRecord) -> bool:
        known = self._entries.get(record.deployment_id)
        if known is not None and known.seq >= seq:
            return False
        self._take(seq, self._shared(record, known), known)
        return True

    def load_rows(self, rows: Iterable[CheckpointRow]) -> int:
        """Take a checkpoint's rows (a start-up's bulk load): as :meth:`apply` of each row's
        record, but built with the shared values at once, not built then rebuilt shared; the
        rows taken.

        A million rows at a start: building each record twice and looking its values up in
        the pools through method calls was 5 us a row, half of a restart's readiness."""
        entries, taken = self._entries, 0
        text, payload_of, instant = (self._texts.sharer(), self._payloads.sharer(),
                                     self._instants.sharer())
        stamp = shared_stamp = None  # rows come in runs of one instant (a reconcile's)
        for row in rows:
            deployment_id = row.deployment_id
            known = entries.get(deployment_id)
            if known is not None:
                if known.seq >= row.seq:
                    continue
                deployment_id = known.record.deployment_id
            name = row.name
            if row.updated_at != stamp:  # an equal time compares cheaper than it hashes
                stamp = row.updated_at
                shared_stamp = instant(stamp)
            record = ScheduleRecord(
                deployment_id=deployment_id,
                name=deployment_id if name is None or name == deployment_id else name,
                cron=text(row.cron), timezone=text(row.timezone), enabled=row.enabled,
                payload=payload_of(RunPayload(text(row.target), row.prompt)),
                version=row.version, deleted=row.deleted, hold=row.hold,
                updated_at=shared_stamp)
            self._take(row.seq, record, known)
            taken += 1
        return taken

    def _take(self, seq: int, record: ScheduleRecord, known: TableEntry | None) -> None:
        """Hold ``record`` (its values shared) in place of ``known``; tell the listeners."""
        self._entries[record.deployment_id] = TableEntry(seq, record)  # the key: its own ID
        if known is None and self._ordered is not None:
            self._ordered.append(record.deployment_id)
            self._unsorted = True
        previous = None if known is None else known.record
        self._enabled += _counts(record) - (previous is not None and _counts(previous))
        self._live += (not record.deleted) - (previous is not None and not previous.deleted)
        for listener in self._listeners:
            listener(record)
        for change in self._change_listeners:
            change(previous, record)

    def _shared(self, record: ScheduleRecord, known: TableEntry | None) -> ScheduleRecord:
        """``record`` with the values many Schedules repeat (calendar, time zone, target,
        payload, a name equal to the ID, the instant it was stamped with) shared with the
        records that have them: each record decodes its own copies, about 300 bytes per
        Schedule (docs/benchmarks.md)."""
        texts = self._texts
        payload = record.payload
        target = texts.share(payload.target)
        if target is not payload.target:
            payload = msgspec.structs.replace(payload, target=target)
        payload = self._payloads.share(payload)
        deployment_id = record.deployment_id if known is None else known.record.deployment_id
        name = deployment_id if record.name == deployment_id else record.name
        cron, timezone = texts.share(record.cron), texts.share(record.timezone)
        updated_at = self._instants.share(record.updated_at)
        if (deployment_id is record.deployment_id and name is record.name
                and cron is record.cron and timezone is record.timezone
                and payload is record.payload and updated_at is record.updated_at):
            return record
        return msgspec.structs.replace(
            record, deployment_id=deployment_id, name=name, cron=cron, timezone=timezone,
            payload=payload, updated_at=updated_at)

    def shared_id(self, deployment_id: str) -> str:
        """The table's own copy of ``deployment_id`` (the object its entry is keyed by), or
        ``deployment_id`` itself when the table has none: the ledger keys its summaries with
        it, so a process keeps one copy of each ID (an interned copy would cost an entry in
        the interpreter's table of interned strings, 30 MB at a million)."""
        entry = self._entries.get(deployment_id)
        return deployment_id if entry is None else entry.record.deployment_id

    def get(self, deployment_id: str) -> ScheduleRecord | None:
        entry = self._entries.get(deployment_id)
        return entry.record if entry is not None else None

    def get_with_seq(self, deployment_id: str) -> tuple[int, ScheduleRecord] | None:
        entry = self._entries.get(deployment_id)
        return (entry.seq, entry.record) if entry is not None else None

    def entries(self) -> list[TableEntry]:
        """Every Schedule with the sequence of its event, as held now (a checkpoint)."""
        return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def all(self) -> list[ScheduleRecord]:
        return [entry.record for entry in self._entries.values()]

    def live(self) -> list[ScheduleRecord]:
        """Schedules not deleted."""
        return [e.record for e in self._entries.values() if not e.record.deleted]

    def live_count(self) -> int:
        """Schedules not deleted (what :meth:`live` lists), kept as records are taken."""
        return self._live

    def live_records(self) -> Iterator[ScheduleRecord]:
        """:meth:`live` one at a time: a reconcile that finds every one given lists none."""
        return (e.record for e in self._entries.values() if not e.record.deleted)

    def in_table_order(self) -> Iterator[TableEntry]:
        """Every entry (deleted Schedules included) in the order the table first took each
        deployment: the order of the first reconcile's list and of a checkpoint's rows, so a
        restart's reconcile of the same list can walk beside it (``plan_reconcile``).
        Not to be held across an await: the table changes under a running follower."""
        return iter(self._entries.values())

    def entry(self, deployment_id: str) -> TableEntry | None:
        """A Schedule's entry (its record and its event's sequence), or None."""
        return self._entries.get(deployment_id)

    def in_order(self, after: str | None = None) -> Iterator[ScheduleRecord]:
        """Every Schedule (deleted ones included) in deployment-ID order, from the first ID
        after ``after`` on: a page of a listing costs its own rows, not a sort of a million.

        The order is kept once made: a Schedule added since is sorted in at the next call
        (one pass over a list sorted but for its tail)."""
        ordered = self._ordered
        if ordered is None:
            ordered = self._ordered = sorted(self._entries)
        elif self._unsorted:
            ordered.sort()
        self._unsorted = False
        entries = self._entries
        for index in range(0 if after is None else bisect_right(ordered, after),
                           len(ordered)):
            entry = entries.get(ordered[index])
            if entry is not None:
                yield entry.record

    def enabled_count(self, excluding: str | None = None) -> int:
        """Enabled, not deleted Schedules (held ones count: a release makes them fire)."""
        if excluding is None:
            return self._enabled
        known = self._entries.get(excluding)
        return self._enabled - (known is not None and _counts(known.record))


def _counts(record: ScheduleRecord) -> bool:
    """Whether ``record`` counts against the capacity (enabled, not deleted)."""
    return record.enabled and not record.deleted
