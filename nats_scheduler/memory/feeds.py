"""Feeds in memory (the contract: :mod:`nats_scheduler.ports.feeds`): the events a journal of
:class:`~.store.MemoryStore` stores, delivered to one projection a moment later, in order."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from .store import StoredEvent

log = logging.getLogger(__name__)

Apply = Callable[[StoredEvent], None]
Subscribe = Callable[[Callable[[StoredEvent], None]], Callable[[], None]]


class MemoryFeed:
    """Replays ``replay()`` (what is stored, at subscribe), then delivers new events."""

    def __init__(self, subscribe: Subscribe, apply: Apply,
                 replay: Callable[[], list[StoredEvent]],
                 on_skip: Callable[[], None] | None = None) -> None:
        self._subscribe = subscribe
        self._apply = apply
        self._replay = replay
        self._on_skip = on_skip
        self._stop: Callable[[], None] | None = None
        self._caught_up = asyncio.Event()
        self.applied_seq = 0
        self.poisoned = 0
        self.last_poison: str | None = None

    async def subscribe(self) -> None:
        self._stop = self._subscribe(self._deliver)
        for stored in self._replay():
            self._deliver(stored)
        self._caught_up.set()

    @property
    def replayed(self) -> bool:
        return self._caught_up.is_set()

    async def caught_up(self, timeout: float = 30.0) -> None:
        await asyncio.wait_for(self._caught_up.wait(), timeout)

    def _deliver(self, stored: StoredEvent) -> None:
        if self._stop is None:
            return  # stopped: a delivery still on its way is dropped
        try:
            self._apply(stored)
        except Exception as exc:  # a bad event must not stop the projection
            self.poisoned += 1
            self.last_poison = f"#{stored.seq}: {type(exc).__name__} {exc}"
            if self._on_skip is not None:
                self._on_skip()
            log.warning("skipped event %s: %s", stored.seq, self.last_poison)
        self.applied_seq = max(self.applied_seq, stored.seq)

    async def stop(self) -> None:
        stop, self._stop = self._stop, None
        if stop is not None:
            stop()
