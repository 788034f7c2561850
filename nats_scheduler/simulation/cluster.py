"""A whole cluster in one process: replicas of the real provider on the in-memory store.

Each replica is a :class:`~nats_scheduler.provider.NatsSchedulerProvider` (its runtime: the
ticker, membership, firing, dispatcher, holds, the pause gate, retention; the same classes
that run in production) whose ports are :class:`~nats_scheduler.memory.ports.MemoryPorts`
over one shared :class:`~nats_scheduler.memory.store.MemoryStore`, on its own host clock
(:class:`~.loop.SimClock`, skewed as the seed draws). A replica can start, stop, crash (its
tasks end where they are: nothing released, nothing deleted) and pause (every store
operation it makes waits until it resumes, as a process stopped by SIGSTOP).

Every replica's life is recorded as windows of liveness, which the invariant checker uses
to know which due times had to fire.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from ..admin.invariant_inputs import Window
from ..clock import Clock
from ..memory.ports import MemoryPorts
from ..memory.store import MemoryStore
from ..projections.ledger import Ledger
from ..projections.schedule_table import ScheduleTable
from ..provider import NatsSchedulerProvider
from ..settings import NatsSettings
from .handler import SimHandler
from .loop import SimClock

PREFIX = "SIM"

T = TypeVar("T")

OWNER: contextvars.ContextVar[str | None] = contextvars.ContextVar("sim_owner", default=None)
"""The process a task belongs to: set in each replica's context, inherited by every task it
creates (so a crash ends exactly that process's tasks)."""


def owner_task_factory(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any],
                       context: contextvars.Context | None = None) -> asyncio.Task[Any]:
    """The loop's task factory: each task remembers which process created it."""
    task = asyncio.Task(coro, loop=loop, context=context)
    task._sim_owner = (context.get(OWNER) if context is not None  # type: ignore[attr-defined]
                       else OWNER.get())
    return task

SIM_SETTINGS = {
    "lease_seconds": 10.0,
    "call_timeout": 30.0,
    "retry_attempts": 4,
    "retry_initial": 1.0,
    "retry_cap": 8.0,
    "drain_seconds": 5.0,
    "store_retry_seconds": 12.0,
    "retention_interval": 600.0,
    "admin_service": False,
}
"""The replicas' settings: the production defaults, but for a longer lease (fewer wakeups of
the renewal and sweep loops per simulated hour) and no admin service (it needs a server)."""


@dataclass(eq=False)
class Replica:
    """One process: its provider while it runs, and when it ran."""

    identity: str
    clock: SimClock
    provider: NatsSchedulerProvider | None = None
    context: contextvars.Context | None = None
    started_at: datetime | None = None
    windows: list[Window] = field(default_factory=list)
    resumed: asyncio.Event | None = None
    """Set while the process runs; cleared while it is paused."""

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` as this process (AstraBox calling its provider): the tasks it
        creates are the process's."""
        return await asyncio.create_task(coro, context=self.context)


@dataclass(eq=False)
class Cluster:
    """The replicas, the store they share and the AstraBox they call."""

    store: MemoryStore
    handler: SimHandler
    now: Callable[[], datetime]
    trace: Callable[[str], None]
    time: Callable[[], float] | None = None
    """The loop's ``time``, for the replicas' clocks (:class:`~.loop.SimClock`)."""
    replicas: list[Replica] = field(default_factory=list)
    beat_seconds: float = 5.0
    _generation: int = 0
    _paused_by_owner: dict[str, asyncio.Event] = field(default_factory=dict)

    def add(self, skew: float) -> Replica:
        replica = Replica(identity=f"r{len(self.replicas)}", clock=SimClock(skew, self.time))
        self.replicas.append(replica)
        return replica

    def _ports(self, identity: str) -> Callable[..., object]:
        store, beat = self.store, self.beat_seconds

        async def make(ledger: Ledger, table: ScheduleTable, clock: Clock,
                       identity: str) -> MemoryPorts:
            return MemoryPorts(store, ledger=ledger, table=table, clock=clock,
                               identity=identity,
                               lease_seconds=float(SIM_SETTINGS["lease_seconds"]),
                               retry_seconds=float(SIM_SETTINGS["store_retry_seconds"]),
                               beat_seconds=beat)

        return make

    async def start(self, replica: Replica) -> None:
        """Start ``replica``'s process (a new process: nothing of a previous life kept)."""
        if replica.provider is not None:
            return
        self._generation += 1
        identity = f"{replica.identity}.{self._generation}"
        settings = NatsSettings(url="memory://", prefix=PREFIX, identity=identity,
                                **SIM_SETTINGS)  # type: ignore[arg-type]
        provider = NatsSchedulerProvider(settings, clock=replica.clock,
                                         ports=self._ports(identity))  # type: ignore[arg-type]
        provider.configure()
        self.trace(f"replica {identity} starts")
        replica.context = contextvars.copy_context()
        replica.context.run(OWNER.set, identity)
        replica.resumed = asyncio.Event()
        replica.resumed.set()
        self._paused_by_owner[identity] = replica.resumed
        try:
            await replica.call(provider.start(self.handler.for_process(identity)))
        except BaseException:
            self.trace(f"replica {identity} could not start")
            raise
        replica.provider = provider
        replica.started_at = self.now()

    def pause(self, replica: Replica) -> None:
        """Stop ``replica``'s process (SIGSTOP): each store operation it makes from now on
        waits until :meth:`resume`; its timers still run, but nothing reaches the store."""
        if replica.provider is None or replica.resumed is None:
            return
        self.trace(f"replica {replica.provider.identity} pauses")
        self._close_window(replica, replica.provider.identity)
        replica.resumed.clear()

    def resume(self, replica: Replica) -> None:
        if replica.provider is None or replica.resumed is None or replica.resumed.is_set():
            return
        self.trace(f"replica {replica.provider.identity} resumes")
        replica.resumed.set()
        replica.started_at = self.now()

    async def gate(self) -> None:
        """The store's gate: a paused process's operation waits for it to resume."""
        owner = OWNER.get()
        resumed = self._paused_by_owner.get(owner) if owner is not None else None
        if resumed is not None and not resumed.is_set():
            await resumed.wait()

    async def stop(self, replica: Replica) -> None:
        """Stop ``replica`` as AstraBox does: gracefully (drain, release)."""
        provider, replica.provider = replica.provider, None
        if provider is None:
            return
        self.trace(f"replica {provider.identity} stops")
        self._close_window(replica, provider.identity)
        if replica.resumed is not None:
            replica.resumed.set()
        await replica.call(provider.stop())

    async def crash(self, replica: Replica) -> None:
        """End ``replica``'s process where it is: its tasks cancelled, nothing released or
        deleted (its leases and its presence record stay until they expire)."""
        provider, replica.provider = replica.provider, None
        if provider is None:
            return
        self.trace(f"replica {provider.identity} crashes")
        self._close_window(replica, provider.identity)
        running = provider.runtime
        if running is None:
            return
        identity = provider.identity
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()
                 and getattr(t, "_sim_owner", None) == identity]
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait(tasks, timeout=5.0) if tasks else None
        for feed in running.followers:
            await feed.stop()

    def _close_window(self, replica: Replica, identity: str) -> None:
        if replica.started_at is not None:
            replica.windows.append(Window(replica.started_at, self.now(), identity))
        replica.started_at = None

    def windows(self) -> list[Window]:
        """Every replica's windows of liveness, the running ones up to now."""
        found = []
        for replica in self.replicas:
            found += replica.windows
            if replica.started_at is not None and replica.provider is not None:
                found.append(Window(replica.started_at, self.now(), replica.provider.identity))
        return found

    @property
    def running(self) -> list[Replica]:
        return [r for r in self.replicas if r.provider is not None]
