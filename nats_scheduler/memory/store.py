"""The in-memory store: the state every in-memory port of every simulated replica shares.

NOT a production backend: it keeps everything in one process's memory and forgets it with
the process. It exists for the contract suite (``tests/test_ports_contract.py``, which holds
it to the same promises as the JetStream store) and for the deterministic simulation
(``nats_scheduler/simulation``), where many replicas of the real runtime run against it on
virtual time.

What it models of a real store, because correctness depends on it:

- one clock stamps every write (``clock``: the store's, never a replica's);
- positions: every journal numbers its events in the order they were stored;
- conditional writes lose races exactly where the real ones do (a create of a Run that
  exists, an append on a position that moved, a lease revision that moved);
- the store can be down (:meth:`MemoryStore.down_for`): every operation fails as a
  transient failure, which the ports retry for their retry budget like the real store;
- a write can be stored and its answer lost (:attr:`MemoryStore.lose_answer`);
- feeds deliver each event a moment after it was stored, later still when told
  (:attr:`MemoryStore.feed_delay`), in order per journal;
- every operation takes a moment (:attr:`MemoryStore.latency`), so concurrent callers
  interleave as they would over a network.

The knobs are callables so the simulation can draw each value from its seed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..clock import Clock
from ..core.events import RunEventType, ScheduleEventType
from ..ports.checkpoints import CheckpointHead, CheckpointRow
from ..ports.history import IndexEntry
from ..ports.leases import LeaseValue


class StoreDown(Exception):
    """The store did not answer (a transient failure: retried within the retry budget)."""


@dataclass(frozen=True)
class Foreign:
    """A message that is not the provider's own, stored where its readers look (the
    simulation's fault; jetstream/foreign.py): every reader skips it, a write goes after
    it, the checker names it."""

    why: str = "not a message of the scheduler's"


FOREIGN = Foreign()


@dataclass
class StoredEvent:
    """One event of a journal, as stored (or a foreign message at that position)."""

    seq: int
    stored_at: datetime
    event: RunEventType | ScheduleEventType | Foreign
    msg_id: str


def last_ours(events: list[StoredEvent] | None) -> StoredEvent | None:
    """The last event of a journal's subject that is ours (foreign ones skipped)."""
    for stored in reversed(events or ()):
        if not isinstance(stored.event, Foreign):
            return stored
    return None


def first_ours(events: list[StoredEvent] | None) -> StoredEvent | None:
    """The first event of a journal's subject that is ours."""
    for stored in events or ():
        if not isinstance(stored.event, Foreign):
            return stored
    return None


@dataclass
class LeaseSlot:
    """A lease as stored: its revision, value, and when it expires by its time to live."""

    revision: int
    value: LeaseValue | Foreign
    expires_at: datetime | None


@dataclass
class ReplicaSlot:
    """A replica's record: its revision and value, and when the store stamped it."""

    revision: int
    value: bytes
    stored_at: datetime


@dataclass
class CheckpointShelf:
    """The checkpoints of the Schedule table stored: each head with its position (the newest
    last), each checkpoint's parts by its id."""

    heads: list[tuple[int, CheckpointHead | Foreign]] = field(default_factory=list)
    parts: dict[str, list[list[CheckpointRow]]] = field(default_factory=dict)
    seq: int = 0
    begun: int = 0
    """Checkpoints begun (the last one's id)."""


Subscriber = Callable[[StoredEvent], None]


@dataclass(eq=False)
class MemoryStore:
    """Everything stored, and how the store behaves (see the module docstring)."""

    clock: Clock
    latency: Callable[[], float] = lambda: 0.0
    """Seconds each operation takes (drawn per operation)."""
    feed_delay: Callable[[], float] = lambda: 0.0
    """Extra seconds before a feed delivers an event (drawn per event and subscriber)."""
    lose_answer: Callable[[], bool] = lambda: False
    """Whether a write that was stored loses its answer (drawn per write)."""
    retention_days: float = 90.0
    retention_runs: int = 10_000
    replica_max_age: float = 30.0
    trace: Callable[[str], None] | None = None
    """Told of every event stored (the simulation's ``--trace``)."""
    gate: Callable[[], Awaitable[None]] | None = None
    """Awaited at the start of every operation: the simulation holds a paused process's
    operations here until it resumes."""

    runs: dict[str, list[StoredEvent]] = field(default_factory=dict)
    """run_id -> the Run's events."""
    run_deployments: dict[str, str] = field(default_factory=dict)
    """run_id -> its deployment."""
    schedules: dict[str, list[StoredEvent]] = field(default_factory=dict)
    index: dict[str, list[tuple[int, datetime, IndexEntry | Foreign, str]]] = field(
        default_factory=dict)
    """deployment_id -> its history entries: (position, stored_at, entry, msg_id)."""
    leases: dict[str, LeaseSlot] = field(default_factory=dict)
    replicas: dict[str, ReplicaSlot] = field(default_factory=dict)
    checkpoints: CheckpointShelf = field(default_factory=CheckpointShelf)
    created: str = ""
    """When the Schedule journal was created (set from ``clock`` when not given)."""
    run_seq: int = 0
    schedule_seq: int = 0
    index_seq: int = 0
    revision: int = 0
    _down_until: datetime | None = None
    _run_subscribers: list[tuple[Subscriber, float]] = field(default_factory=list)
    _schedule_subscribers: list[tuple[Subscriber, float]] = field(default_factory=list)
    _replica_watchers: list[Callable[[str, ReplicaSlot | None], None]] = field(
        default_factory=list)
    _last_delivery: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.created = self.created or self.clock.now().isoformat()

    # ------------------------------------------------------------------ behaviour

    def down_for(self, seconds: float) -> None:
        """Fail every operation for ``seconds`` of the store's clock from now."""
        self._down_until = self.clock.now() + timedelta(seconds=seconds)

    @property
    def is_down(self) -> bool:
        if self._down_until is None:
            return False
        if self.clock.now() < self._down_until:
            return True
        self._down_until = None  # up again: no clock read per operation until the next
        return False

    async def operation(self) -> None:
        """Every operation's moment: its latency, and StoreDown while the store is down."""
        if self.gate is not None:
            await self.gate()
        delay = self.latency()
        await asyncio.sleep(delay) if delay > 0 else await asyncio.sleep(0)
        if self.is_down:
            raise StoreDown("the store did not answer")

    def answered(self) -> None:
        """After a write was stored: StoreDown when its answer is lost."""
        if self.lose_answer():
            raise StoreDown("the answer was lost")

    def now(self) -> datetime:
        return self.clock.now()

    def next_revision(self) -> int:
        self.revision += 1
        return self.revision

    # ------------------------------------------------------------------ foreign messages

    def foreign_run(self, deployment_id: str, run_id: str) -> int:
        """Store a foreign message on a Run's subject (it may not exist yet); its position."""
        self.run_seq += 1
        stored = StoredEvent(self.run_seq, self.now(), FOREIGN, "")
        self.runs.setdefault(run_id, []).append(stored)
        self.run_deployments.setdefault(run_id, deployment_id)
        self.stored_run_event(stored)
        return stored.seq

    def foreign_schedule(self, deployment_id: str) -> int:
        """Store a foreign message on a Schedule's subject; its position."""
        self.schedule_seq += 1
        stored = StoredEvent(self.schedule_seq, self.now(), FOREIGN, "")
        self.schedules.setdefault(deployment_id, []).append(stored)
        self.stored_schedule_event(stored)
        return stored.seq

    def foreign_index(self, deployment_id: str) -> int:
        """Store a foreign message on a deployment's history index; its position."""
        self.index_seq += 1
        self.index.setdefault(deployment_id, []).append(
            (self.index_seq, self.now(), FOREIGN, ""))
        return self.index_seq

    def foreign_lease(self, run_id: str) -> int:
        """Put a foreign value under a Run's lease key; its revision."""
        revision = self.next_revision()
        self.leases[run_id] = LeaseSlot(revision, FOREIGN, None)
        return revision

    def foreign_replica(self, key: str) -> int:
        """Put a foreign value under a replica key; its revision."""
        slot = ReplicaSlot(self.next_revision(), b"\xff not a replica", self.now())
        self.replicas[key] = slot
        self.replica_changed(key, slot)
        return slot.revision

    def foreign_checkpoint_head(self) -> int:
        """Store a foreign message as the newest checkpoint head; its position."""
        self.checkpoints.seq += 1
        self.checkpoints.heads.append((self.checkpoints.seq, FOREIGN))
        return self.checkpoints.seq

    # ------------------------------------------------------------------ feeds

    def subscribe_runs(self, subscriber: Subscriber) -> Callable[[], None]:
        return self._subscribe(self._run_subscribers, subscriber)

    def subscribe_schedules(self, subscriber: Subscriber) -> Callable[[], None]:
        return self._subscribe(self._schedule_subscribers, subscriber)

    def watch_replicas(self, watcher: Callable[[str, ReplicaSlot | None], None]
                       ) -> Callable[[], None]:
        self._replica_watchers.append(watcher)
        return lambda: self._replica_watchers.remove(watcher) if (
            watcher in self._replica_watchers) else None

    def _subscribe(self, subscribers: list[tuple[Subscriber, float]],
                   subscriber: Subscriber) -> Callable[[], None]:
        entry = (subscriber, 0.0)
        subscribers.append(entry)
        return lambda: subscribers.remove(entry) if entry in subscribers else None

    def stored_run_event(self, stored: StoredEvent) -> None:
        self._traced("run", stored)
        self._deliver(self._run_subscribers, stored)

    def stored_schedule_event(self, stored: StoredEvent) -> None:
        self._traced("schedule", stored)
        self._deliver(self._schedule_subscribers, stored)

    def _traced(self, journal: str, stored: StoredEvent) -> None:
        if self.trace is None:
            return
        event = stored.event
        if isinstance(event, Foreign):
            self.trace(f"{journal} #{stored.seq} foreign")
            return
        tag = type(event).__struct_config__.tag
        subject = getattr(event, "run", None) or getattr(event, "schedule", None)
        ident = getattr(subject, "run_id", None) or getattr(subject, "deployment_id", "?")
        self.trace(f"{journal} #{stored.seq} {tag} {ident} by {event.actor}")

    def replica_changed(self, key: str, slot: ReplicaSlot | None) -> None:
        for watcher in list(self._replica_watchers):
            watcher(key, slot)

    def _deliver(self, subscribers: list[tuple[Subscriber, float]], stored: StoredEvent) -> None:
        """Deliver to each subscriber after its drawn delay, never before an earlier event
        of the same journal reached it (feeds keep the store's order)."""
        loop = asyncio.get_running_loop()
        for subscriber, _ in list(subscribers):
            key = id(subscriber)
            # strictly later than the one before: timers of one instant run in no set order
            at = max(loop.time() + self.feed_delay(), self._last_delivery.get(key, 0.0) + 1e-6)
            self._last_delivery[key] = at
            loop.call_at(at, subscriber, stored)
