"""The live replicas in memory (the contract: :mod:`nats_scheduler.ports.replicas`).

Each replica's record is a slot of :class:`~.store.MemoryStore`, put again every beat; every
replica watches the slots and counts a replica live while its record's last put is within
three beats of the newest put it has seen, by the store's stamps on them (never its own
elapsed time). Each beat gives one sample of the store's clock: the elapsed time around the
put, and the store's stamp on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ..clock import Clock
from ..core.serverclock import Sample
from ..core.serving import Serving
from ..tasks import cancel_and_wait
from .store import MemoryStore, ReplicaSlot

log = logging.getLogger(__name__)

WINDOW_BEATS = 3


class MemoryMembers:
    """One replica's membership over :class:`MemoryStore`."""

    def __init__(self, store: MemoryStore, identity: str, *, clock: Clock,
                 beat_seconds: float, on_sample: Callable[[Sample], None] | None,
                 wall: Callable[[], float] | None) -> None:
        self._store = store
        self.identity = identity
        self._clock = clock
        self.beat_seconds = beat_seconds
        self._on_sample = on_sample
        self._wall = wall or (lambda: clock.now().timestamp())
        self._seen: dict[str, float] = {}
        """identity -> the store's stamp of its latest put seen (seconds)."""
        self._newest = float("-inf")
        """The newest stamp of a put seen (ours included)."""
        self._task: asyncio.Task[None] | None = None
        self._unwatch: Callable[[], None] | None = None
        self._joined = False

    @staticmethod
    def _elapsed() -> float:
        return asyncio.get_running_loop().time()

    async def _beat(self) -> None:
        sent, wall_sent = self._elapsed(), self._wall()
        await self._store.operation()
        slot = ReplicaSlot(self._store.next_revision(), self.identity.encode(),
                           self._store.now())
        self._store.replicas[self.identity] = slot
        self._store.replica_changed(self.identity, slot)
        if self._on_sample is not None:
            self._on_sample(Sample(sent=sent, acked=self._elapsed(),
                                   server=slot.stored_at.timestamp(), wall_sent=wall_sent,
                                   wall_acked=self._wall()))

    def _watched(self, identity: str, slot: ReplicaSlot | None) -> None:
        if slot is None or slot.value != identity.encode():  # gone, or foreign: no replica
            self._seen.pop(identity, None)
        else:
            stamp = slot.stored_at.timestamp()
            self._seen[identity] = stamp
            self._newest = max(self._newest, stamp)

    async def start(self) -> None:
        await self._beat()
        self._joined = True
        self._unwatch = self._store.watch_replicas(self._watched)
        for identity, slot in self._store.replicas.items():
            self._watched(identity, slot)
        self._task = asyncio.create_task(self._beat_forever(), name="presence-beat")

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.beat_seconds)
            try:
                await self._beat()
            except Exception:
                log.debug("a beat of %s failed", self.identity, exc_info=True)

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task], timeout=2.0)
            self._task = None
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        if self._joined:
            self._joined = False
            with contextlib.suppress(Exception):
                await self._store.operation()
                self._store.replicas.pop(self.identity, None)
                self._store.replica_changed(self.identity, None)
        self._seen.clear()

    async def announce(self) -> None:
        if self._joined:
            with contextlib.suppress(Exception):
                await self._beat()

    def live(self) -> tuple[str, ...]:
        newest, window = self._newest, WINDOW_BEATS * self.beat_seconds
        return tuple(sorted({self.identity,
                             *(i for i, put in self._seen.items() if newest - put < window)}))


class MemoryReplicas:
    """The live replicas port over :class:`MemoryStore`."""

    def __init__(self, store: MemoryStore, *, beat_seconds: float = 1.0) -> None:
        self._store = store
        self._beat_seconds = beat_seconds

    async def open(self, identity: str, *, clock: Clock,
                   on_sample: Callable[[Sample], None] | None = None,
                   wall: Callable[[], float] | None = None,
                   serving: Callable[[], Serving] | None = None) -> MemoryMembers:
        """``serving`` is not kept: no admin service runs on the memory store."""
        return MemoryMembers(self._store, identity, clock=clock,
                             beat_seconds=self._beat_seconds, on_sample=on_sample, wall=wall)
