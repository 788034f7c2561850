"""The Schedule table: a projection of the Schedule events (latest state per deployment).

The ticker plans from it and reconcile compares against it. It is a plan, not the
authority: ``fire_due`` re-reads the Schedule from the store before it stores a Run, so a
stale table can delay a firing but never make a disabled Schedule fire.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.events import ScheduleRecord

Listener = Callable[[ScheduleRecord], None]


class ScheduleTable:
    """Latest state of every Schedule ever applied (deleted ones included)."""

    def __init__(self) -> None:
        self._records: dict[str, tuple[int, ScheduleRecord]] = {}
        self._listeners: list[Listener] = []
        self._enabled: set[str] = set()

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def apply(self, seq: int, record: ScheduleRecord) -> bool:
        known = self._records.get(record.deployment_id)
        if known is not None and known[0] >= seq:
            return False
        self._records[record.deployment_id] = (seq, record)
        if record.enabled and not record.deleted:
            self._enabled.add(record.deployment_id)
        else:
            self._enabled.discard(record.deployment_id)
        for listener in self._listeners:
            listener(record)
        return True

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
        return len(self._enabled) - (1 if excluding in self._enabled else 0)
