"""Every port of one simulated replica over a shared :class:`~.store.MemoryStore`.

A tool for the contract suite and the deterministic simulation, never a production backend
(see ``store.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..clock import Clock
from ..ports.runs import RunProjection
from ..ports.schedules import ScheduleCopies
from .checkpoints import MemoryCheckpoints
from .history import MemoryHistory
from .leases import MemoryLeases
from .replicas import MemoryReplicas
from .retry import retrying
from .runs import MemoryRunJournal
from .schedules import MemorySchedules
from .store import MemoryStore

T = TypeVar("T")


class MemoryPorts:
    """The ports of one process (``identity``) over ``store``; ``ledger`` and ``table`` are
    its projections, kept current with its own writes."""

    def __init__(self, store: MemoryStore, *, ledger: RunProjection, table: ScheduleCopies,
                 clock: Clock, identity: str, lease_seconds: float = 5.0,
                 retry_seconds: float = 10.0, beat_seconds: float = 1.0) -> None:
        self.store = store
        self._retry_seconds = retry_seconds
        self._closed = False
        self.history = MemoryHistory(store, retry_seconds=retry_seconds)
        self.leases = MemoryLeases(store, clock, identity, lease_seconds)
        self.runs = MemoryRunJournal(store, ledger, history=self.history, leases=self.leases,
                                     identity=identity, retry_seconds=retry_seconds)
        self.schedules = MemorySchedules(store, table, identity=identity,
                                         retry_seconds=retry_seconds)
        self.replicas = MemoryReplicas(store, beat_seconds=beat_seconds)
        self.checkpoints = MemoryCheckpoints(store, retry_seconds=retry_seconds)

    @property
    def connected(self) -> bool:
        return not self._closed and not self.store.is_down

    @property
    def retry_seconds(self) -> float:
        return self._retry_seconds

    @property
    def max_payload(self) -> int:
        return 1024 * 1024

    async def retrying(self, what: str, op: Callable[[], Awaitable[T]],
                       retry_seconds: float | None = None) -> T:
        return await retrying(what, op, self._retry_seconds if retry_seconds is None
                              else retry_seconds)

    async def close(self) -> None:
        self._closed = True
