"""The lease table in memory (the contract: :mod:`nats_scheduler.ports.leases`).

A lease is a slot of :class:`~.store.MemoryStore` with a revision; every change is a
compare-and-set on it, and a slot written with a time to live is gone once the store's clock
passes it. Expiry for readers is judged as the JetStream table judges it: a revision seen
unchanged for a lease length of this process's elapsed time (the event loop's clock, which
is virtual in the simulation).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import timedelta

import msgspec

from ..clock import Clock
from ..ports.leases import FREE, UNREADABLE, Lease, LeaseValue
from .store import Foreign, LeaseSlot, MemoryStore, StoreDown

OPEN_KEY_TTL_MIN = 60.0
"""Seconds an open lease lives after its last write, at least (as the JetStream table)."""


class MemoryLeases:
    """One process's view of the leases of :class:`MemoryStore`."""

    def __init__(self, store: MemoryStore, clock: Clock, identity: str, lease_seconds: float,
                 *, elapsed: Callable[[], float] | None = None) -> None:
        self._store = store
        self._clock = clock
        self._elapsed = elapsed or (lambda: asyncio.get_running_loop().time())
        self._seen: dict[str, tuple[int, float, float]] = {}
        """run_id -> (revision last read, elapsed time it was first read, last read)."""
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.key_ttl = max(OPEN_KEY_TTL_MIN, 12 * lease_seconds)

    def _value(self, run_id: str, acquired_at: object = None) -> LeaseValue:
        now = self._clock.now()
        return LeaseValue(run_id=run_id, holder=self.identity,
                          expires_at=now + timedelta(seconds=self.lease_seconds),
                          acquired_at=acquired_at or now)  # type: ignore[arg-type]

    def _slot(self, run_id: str) -> LeaseSlot | None:
        """The live slot of ``run_id`` (one past its time to live is gone)."""
        slot = self._store.leases.get(run_id)
        if slot is not None and slot.expires_at is not None and (
                self._store.now() >= slot.expires_at):
            del self._store.leases[run_id]
            return None
        return slot

    def _write(self, run_id: str, value: LeaseValue, *, ttl: bool = True) -> int:
        revision = self._store.next_revision()
        expires = self._store.now() + timedelta(seconds=self.key_ttl) if ttl else None
        self._store.leases[run_id] = LeaseSlot(revision, value, expires)
        return revision

    def _held(self, run_id: str, slot: LeaseSlot) -> LeaseValue:
        """A slot's lease; a foreign value (jetstream/foreign.py) is nobody's: UNREADABLE."""
        if isinstance(slot.value, Foreign):
            now = self._clock.now()
            return LeaseValue(run_id=run_id, holder=UNREADABLE, expires_at=now,
                              acquired_at=now)
        return slot.value

    async def announce(self, run_id: str) -> Lease | None:
        await self._store.operation()
        slot = self._slot(run_id)
        if slot is not None and not isinstance(slot.value, Foreign):  # a foreign one: taken
            if slot.value.holder != self.identity:
                return None
            return Lease(run_id, run_id, slot.revision, slot.value)  # ours: a resend
        value = self._value(run_id)
        revision = self._write(run_id, value)
        self._store.answered()
        return Lease(run_id, run_id, revision, value)

    async def announce_many(self, run_ids: Sequence[str]) -> list[Lease | Exception | None]:
        results: list[Lease | Exception | None] = []
        for run_id in run_ids:
            try:
                results.append(await self.announce(run_id))
            except Exception as exc:
                results.append(exc)
        return results

    def _observe(self, run_id: str, revision: int) -> None:
        """As the JetStream table: a revision unread for half a lease counts from now."""
        now = self._elapsed()
        seen = self._seen.get(run_id)
        first = (now if seen is None or seen[0] != revision
                 or now - seen[2] > self.lease_seconds * 0.5 else seen[1])
        self._seen[run_id] = (revision, first, now)

    def expired(self, value: LeaseValue) -> bool:
        if value.holder in (FREE, UNREADABLE):
            return True
        seen = self._seen.get(value.run_id)
        return seen is not None and self._elapsed() - seen[1] >= self.lease_seconds

    async def current(self, run_id: str) -> tuple[int, LeaseValue] | None:
        await self._store.operation()
        slot = self._slot(run_id)
        if slot is None:
            self._seen.pop(run_id, None)
            return None
        self._observe(run_id, slot.revision)
        return slot.revision, self._held(run_id, slot)

    async def acquire(self, run_id: str) -> tuple[Lease, str | None] | None:
        try:
            await self._store.operation()
            value = self._value(run_id)
            slot = self._slot(run_id)
            if slot is None:
                revision = self._write(run_id, value)
                self._store.answered()
                return Lease(run_id, run_id, revision, value), None
            self._observe(run_id, slot.revision)
            read, held = slot.revision, self._held(run_id, slot)
            if held.holder != self.identity and not self.expired(held):
                return None
            await self._store.operation()
            slot = self._slot(run_id)
            if slot is None or slot.revision != read:
                return None  # moved on meanwhile: another taker won
            revision = self._write(run_id, value)
            self._store.answered()
        except StoreDown:
            return None  # a sweep tries again later
        previous = held.holder if held.holder != self.identity else None
        return Lease(run_id, run_id, revision, value), previous

    async def renew(self, lease: Lease) -> Lease | None:
        await self._store.operation()
        slot = self._slot(lease.run_id)
        if slot is None or slot.revision != lease.revision:
            return None
        value = self._value(lease.run_id, lease.value.acquired_at)
        revision = self._write(lease.run_id, value)
        self._store.answered()
        return Lease(lease.run_id, lease.key, revision, value)

    async def release(self, lease: Lease, *, finished: bool) -> None:
        if finished:
            return
        try:
            await self._store.operation()
        except StoreDown:
            return  # it expires by itself
        slot = self._slot(lease.run_id)
        if slot is None or slot.revision != lease.revision:
            return
        free = msgspec.structs.replace(lease.value, holder=FREE, expires_at=self._clock.now())
        self._write(lease.run_id, free, ttl=False)

    async def forget(self, run_id: str) -> None:
        await self._store.operation()
        self._store.leases.pop(run_id, None)

    async def open_runs(self) -> dict[str, LeaseValue]:
        await self._store.operation()
        return {run_id: self._held(run_id, slot) for run_id in list(self._store.leases)
                if (slot := self._slot(run_id)) is not None}
