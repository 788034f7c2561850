"""The Run journal in memory (the contract: :mod:`nats_scheduler.ports.runs`).

Each Run is a list of stored events of :class:`~.store.MemoryStore`: its first is unique
(a create of a Run that exists gets the stored Run back), every later one is appended only
on the position its writer last saw. Writes are applied at once to this process's ledger;
the feed delivers everybody's a moment later, this process's own skipped. An answer lost
after the write was stored is retried like the real store's: the resend finds its own write
(by its message ID) and takes it as done.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TypeVar

from ..core.events import RunCreated, RunEventType, RunRecord
from ..names import run_event_msg_id
from ..ports.foreign import ForeignMessage
from ..ports.runs import Announcement, Conflict, RunProjection, Stored
from .feeds import MemoryFeed
from .history import MemoryHistory
from .leases import MemoryLeases
from .retry import retrying
from .store import Foreign, MemoryStore, StoredEvent, first_ours, last_ours

T = TypeVar("T")


class MemoryRunJournal:
    """One process's Run journal over :class:`MemoryStore`."""

    def __init__(self, store: MemoryStore, ledger: RunProjection, *, history: MemoryHistory,
                 leases: MemoryLeases, identity: str, retry_seconds: float) -> None:
        self._store = store
        self._ledger = ledger
        self._history = history
        self._leases = leases
        self._identity = identity
        self._retry_seconds = retry_seconds
        self._decisions = itertools.count(1)
        self._own: set[int] = set()
        """Positions of this process's writes not yet delivered back by its feed."""

    async def _retrying(self, what: str, op: Callable[[], Awaitable[T]],
                        retry_seconds: float | None = None) -> T:
        return await retrying(what, op, self._retry_seconds if retry_seconds is None
                              else retry_seconds)

    async def announce(self, run: RunRecord) -> Announcement:
        position = await self._retrying("could not record a run",
                                        lambda: self._history.announce(run))
        lease = await self._retrying("could not open a run",
                                     lambda: self._leases.announce(run.run_id))
        return Announcement(position.seq, lease, position.created_at)

    async def announce_many(self, runs: Sequence[RunRecord]) -> list[Announcement | Exception]:
        results: list[Announcement | Exception] = []
        for run in runs:
            try:
                results.append(await self.announce(run))
            except Exception as exc:
                results.append(exc)
        return results

    def _stored(self, run: RunRecord, event: RunEventType, msg_id: str) -> int:
        store = self._store
        store.run_seq += 1
        stored = StoredEvent(store.run_seq, store.now(), event, msg_id)
        store.runs.setdefault(run.run_id, []).append(stored)
        store.run_deployments[run.run_id] = run.deployment_id
        self._own.add(stored.seq)
        self._ledger.apply(stored.seq, run)
        store.stored_run_event(stored)
        return stored.seq

    async def create(self, event: RunCreated, *, msg_id: str,
                     retry_seconds: float | None = None) -> Stored:
        run = event.run

        async def once() -> Stored:
            await self._store.operation()
            events = self._store.runs.get(run.run_id)
            last = last_ours(events)  # foreign messages on its subject hold no Run
            if last is not None:
                record = last.event.run  # type: ignore[union-attr]
                self._ledger.apply(last.seq, record)
                return Stored(last.seq, record, first_ours(events).event == event)  # type: ignore[union-attr]
            seq = self._stored(run, event, msg_id)
            self._store.answered()
            return Stored(seq, run, True)

        return await self._retrying("could not store a run", once, retry_seconds)

    async def create_many(
        self, events: Sequence[RunCreated], msg_ids: Sequence[str], *,
        still_fresh: Callable[[], bool] = lambda: True,
    ) -> list[Stored | Exception]:
        results: list[Stored | Exception] = []
        for event, msg_id in zip(events, msg_ids, strict=True):
            try:
                results.append(await self.create(event, msg_id=msg_id, retry_seconds=0))
            except Exception as exc:
                results.append(exc)
        return results

    async def append(self, expected_seq: int, event: RunEventType) -> int:
        run = event.run
        msg_id = run_event_msg_id(run.run_id, expected_seq,
                                  f"{self._identity}-{next(self._decisions)}")

        async def once() -> int:
            await self._store.operation()
            # foreign messages after the writer's last event are stepped over, as the
            # JetStream journal appends after them (jetstream/foreign.py)
            last = last_ours(self._store.runs.get(run.run_id))
            if last is None or last.seq != expected_seq:
                if last is not None and last.msg_id == msg_id:
                    return last.seq  # our own, stored before its answer was lost
                raise Conflict(run.run_id)
            seq = self._stored(run, event, msg_id)
            self._store.answered()
            return seq

        return await self._retrying("could not store an event", once)

    def _last(self, run_id: str) -> tuple[int, RunRecord] | None:
        last = last_ours(self._store.runs.get(run_id))
        if last is None:
            return None
        return last.seq, last.event.run  # type: ignore[union-attr]

    async def fetch(self, deployment_id: str, run_id: str) -> tuple[int, RunRecord] | None:
        await self._retrying("could not read", self._store.operation)
        found = self._last(run_id)
        if found is None or found[1].deployment_id != deployment_id:
            return None
        self._ledger.apply(*found)
        return found

    async def find(self, run_id: str) -> tuple[int, RunRecord] | None:
        await self._retrying("could not read", self._store.operation)
        found = self._last(run_id)
        if found is not None:
            self._ledger.apply(*found)
        return found

    async def first_stored_at(self, deployment_id: str, run_id: str) -> datetime | None:
        await self._retrying("could not read", self._store.operation)
        first = first_ours(self._store.runs.get(run_id))
        return first.stored_at if first is not None else None

    async def end(self) -> int:
        await self._retrying("could not read", self._store.operation)
        return self._store.run_seq

    def feed(self, *, from_seq: int, on_skip: Callable[[], None] | None = None) -> MemoryFeed:
        def apply(stored: StoredEvent) -> None:
            if stored.seq < from_seq:
                return
            if stored.seq in self._own:
                self._own.discard(stored.seq)
                return  # applied when written
            if isinstance(stored.event, Foreign):
                raise ForeignMessage(f"#{stored.seq}", stored.event.why)  # skipped, counted
            run = stored.event.run
            self._ledger.apply_event(stored.seq, stored.event,  # type: ignore[arg-type]
                                     (run.deployment_id, run.run_id))

        return MemoryFeed(self._store.subscribe_runs, apply, list, on_skip)
