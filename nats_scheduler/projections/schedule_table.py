"""The Schedule table: a projection of the Schedule events (latest state per deployment).

The ticker plans from it and reconcile compares against it. It is a plan, not the
authority: ``fire_due`` re-reads the Schedule from the store before it stores a Run, so a
stale table can delay a firing but never make a disabled Schedule fire.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import msgspec

from ..core.events import ScheduleRecord

Listener = Callable[[ScheduleRecord], None]

SHARED_TEXTS = 20_000
"""At most this many distinct calendars, time zones and targets are shared between records
(beyond it, new ones are kept as decoded: the pool never grows with unique texts)."""


class ScheduleTable:
    """Latest state of every Schedule ever applied (deleted ones included)."""

    def __init__(self) -> None:
        self._records: dict[str, tuple[int, ScheduleRecord]] = {}
        self._listeners: list[Listener] = []
        self._enabled = 0
        self._texts: dict[str, str] = {}

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def apply(self, seq: int, record: ScheduleRecord) -> bool:
        known = self._records.get(record.deployment_id)
        if known is not None and known[0] >= seq:
            return False
        record = self._shared(record)
        self._records[record.deployment_id] = (seq, record)  # the key: the interned ID
        self._enabled += _counts(record) - (known is not None and _counts(known[1]))
        for listener in self._listeners:
            listener(record)
        return True

    def _shared(self, record: ScheduleRecord) -> ScheduleRecord:
        """``record`` with the texts many Schedules repeat (calendar, time zone, target, a
        name equal to the ID) shared with the records that have them: each record decodes
        its own copies, about 240 bytes per Schedule (docs/benchmarks.md)."""
        texts = self._texts

        def share(text: str) -> str:
            found = texts.get(text)
            if found is None:
                if len(texts) < SHARED_TEXTS:
                    texts[text] = text
                return text
            return found

        payload = record.payload
        target = share(payload.target)
        deployment_id = sys.intern(record.deployment_id)  # shared with the ledger's key
        name = deployment_id if record.name == deployment_id else record.name
        return msgspec.structs.replace(
            record, deployment_id=deployment_id, name=name, cron=share(record.cron),
            timezone=share(record.timezone),
            payload=payload if target is payload.target
            else msgspec.structs.replace(payload, target=target))

    def get(self, deployment_id: str) -> ScheduleRecord | None:
        entry = self._records.get(deployment_id)
        return entry[1] if entry else None

    def get_with_seq(self, deployment_id: str) -> tuple[int, ScheduleRecord] | None:
        return self._records.get(deployment_id)

    def all(self) -> list[ScheduleRecord]:
        return [record for _, record in self._records.values()]

    def live(self) -> list[ScheduleRecord]:
        """Schedules not deleted."""
        return [r for _, r in self._records.values() if not r.deleted]

    def enabled_count(self, excluding: str | None = None) -> int:
        """Enabled, not deleted Schedules (held ones count: a release makes them fire)."""
        if excluding is None:
            return self._enabled
        known = self._records.get(excluding)
        return self._enabled - (known is not None and _counts(known[1]))


def _counts(record: ScheduleRecord) -> bool:
    """Whether ``record`` counts against the capacity (enabled, not deleted)."""
    return record.enabled and not record.deleted
