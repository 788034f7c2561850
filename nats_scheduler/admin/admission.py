"""How many requests of each endpoint the admin service answers at once, how much of the
replica's event loop they may take, and what it says past that: the busy answer, given at
once, never a silence.

nats-py 2.16 runs a subscription's handler one message at a time (``nats.micro`` endpoints
included): a slow endpoint queued every request behind the one running, and under a flood
its callers timed out with no answer at all (``cluster.status``: a fan-out to every replica
then a read of the leases, some 0.2 s each, 950 of 1,000 unanswered). The binding now
answers each request in a task of its own (``jetstream/admin_transport.py``) when the
endpoint's :class:`EndpointGate` takes it, and the busy answer at once when it does not
(:func:`busy_error`: ``unavailable`` with ``retry_after``; nothing was done, so asking again
is always safe). ``cluster.status`` callers share one fan-out (:class:`SingleFlight`).

A gate takes a request while its endpoint answers fewer than its limit
(:data:`ENDPOINT_LIMITS`) and while the service is within its share of the event loop
(:class:`LoopShare`). The service runs in the replica's loop, beside the firing: a page of
the Schedule list or a health answer holds the loop while it is computed (milliseconds at
a few hundred Schedules, more at 100,000), so a flood of them, each quick, would take the
whole loop and a due time would start late. The time each request's steps hold the loop
is measured (:func:`charged`) and the share caps it; ``replica.status`` is exempt (other
replicas' ``cluster.status`` must count this one), though charged.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from enum import Enum
from typing import Any, Generic, TypeVar

from .api import AdminError, ErrorCode
from .host import AdminHost

T = TypeVar("T")

ENDPOINT_LIMITS: dict[str, int] = {
    "schedules.list": 8,          # a page from memory
    "schedules.get": 16,          # from memory, or one read of the store
    "schedules.hold": 16,         # one conditional write
    "schedules.release": 16,
    "schedules.hold_bulk": 2,     # up to 1,000 writes a page
    "schedules.release_bulk": 2,
    "schedules.explain": 4,       # reads of the store, up to 1,000 due times
    "schedules.load": 2,          # a pass over the Schedule table, in a thread
    "runs.list": 8,               # pipelined reads of the history
    "runs.get": 16,               # one read
    "runs.run_now": 16,           # two writes
    "runs.replay": 16,
    "cluster.status": 256,        # waiters of one shared fan-out
    "health": 2,                  # a pass over the Schedule table and a read of the leases
    "replica.status": 16,         # from memory; one per fan-out of any replica
}
"""Endpoint (under ``<P>.admin.``) -> the requests one process answers at once
(docs/operations.md, "Under load: busy answers")."""

LOOP_SHARE = 0.1
"""The share of the event loop's time the admin service's requests may hold, over time,
while the replica fires (due times now or within :data:`FIRING_AHEAD`, or a herd's Runs
dispatched: :data:`HERD_RUNS`); a replica that does not gives its requests the whole loop."""

HERD_RUNS = 64
"""Runs held at once from which the replica counts as firing a herd (a few in flight, their
handler calls waiting on AstraBox, leave the loop idle)."""

FIRING_AHEAD = 2.0
"""Seconds before a due time from which the share holds (the loop is the firing's then)."""

LOOP_BURST = 0.5
"""Seconds of the loop the service may hold at once beyond its share (a quiet replica
answers a few heavy requests in a row at full speed)."""

EXEMPT = frozenset({"replica.status"})
"""Endpoints the loop share does not refuse (they are charged all the same)."""

BUSY_MESSAGE = "the scheduler is busy: try again in a moment"

BUSY_RETRY_AFTER = 1.0
"""Seconds a busy answer asks the client to wait before asking again."""


class Firing(Enum):
    """How a replica fires now, as the loop share sees it (:func:`fires`)."""

    QUIET = "quiet"
    """Nothing due soon, no Run held: the admin service may take the whole loop."""
    HOLDING = "holding"
    """A herd's Runs held (:data:`HERD_RUNS` or more): the share holds."""
    DUE = "due"
    """Due times fired now, or within :data:`FIRING_AHEAD`: the share holds from the start."""


def fires(host: AdminHost) -> Firing:
    """How the replica fires now (the share holds unless :attr:`Firing.QUIET`)."""
    ticker, dispatcher = host.ticker, host.dispatcher
    if ticker is not None and ticker.firing_within(FIRING_AHEAD):
        return Firing.DUE
    herd = dispatcher is not None and dispatcher.tasks >= HERD_RUNS
    return Firing.HOLDING if herd else Firing.QUIET


def busy_error() -> AdminError:
    """The answer past an endpoint's limit: ``unavailable``, nothing done, ask again later."""
    return AdminError(ErrorCode.UNAVAILABLE, BUSY_MESSAGE, retry_after=BUSY_RETRY_AFTER)


class LoopShare:
    """A leaky bucket of loop time: each request's steps add what they held the loop
    (:meth:`charge`); it drains at ``share`` seconds per second; over ``burst`` it is
    :meth:`exhausted` until it drained below again.

    ``firing`` says how the replica fires now (:class:`Firing`): the share holds unless it
    is :attr:`Firing.QUIET` (then the bucket drains at once: a quiet console reads at full
    speed). When due times come (:attr:`Firing.DUE`), the bucket starts full: the service
    has its share from that moment, no burst on top (the requests of a flood that began
    while the replica was quiet would take the loop the due times need).
    """

    def __init__(self, share: float = LOOP_SHARE, burst: float = LOOP_BURST, *,
                 timer: Callable[[], float] = time.perf_counter,
                 firing: Callable[[], Firing] = lambda: Firing.DUE) -> None:
        self.share = share
        self.burst = burst
        self._timer = timer
        self._firing = firing
        self._was = Firing.DUE
        self._level = 0.0
        self._at = timer()
        self.charged = 0.0
        """Seconds of the loop the service's requests held, in all."""

    def _drain(self) -> None:
        now = self._timer()
        firing = self._firing()
        if firing is Firing.QUIET:
            self._level = 0.0
        elif firing is Firing.DUE and self._was is not Firing.DUE:
            self._level = max(self._level, self.burst)  # due times come: the share, no burst
        else:
            self._level = max(0.0, self._level - (now - self._at) * self.share)
        self._was = firing
        self._at = now

    def charge(self, seconds: float) -> None:
        self._drain()
        self._level += seconds
        self.charged += seconds

    def exhausted(self) -> bool:
        self._drain()
        return self._level > self.burst


class EndpointGate:
    """An endpoint's admission (``jetstream/admin_transport.Gate``): at most ``limit``
    requests at once, and none while ``share`` is exhausted (unless ``exempt``)."""

    def __init__(self, limit: int, share: LoopShare, *, exempt: bool = False) -> None:
        self.limit = limit
        self.running = 0
        self._share = share
        self._exempt = exempt

    def enter(self) -> bool:
        if self.running >= self.limit or (not self._exempt and self._share.exhausted()):
            return False
        self.running += 1
        return True

    def leave(self) -> None:
        self.running -= 1


async def charged(work: Coroutine[Any, Any, T], share: LoopShare,
                  timer: Callable[[], float] = time.perf_counter) -> T:
    """``await work``, charging ``share`` with the time each of its steps holds the loop
    (from one suspension to the next: what delays everything else the loop runs)."""
    return await _Charged(work, share, timer)


class _Charged(Generic[T]):
    """Drives a coroutine step by step, timing each step (the task sees its futures)."""

    def __init__(self, work: Coroutine[Any, Any, T], share: LoopShare,
                 timer: Callable[[], float]) -> None:
        self._work = work
        self._share = share
        self._timer = timer

    def __await__(self) -> Generator[Any, Any, T]:
        send: Any = None
        thrown: BaseException | None = None
        while True:
            began = self._timer()
            try:
                step = self._work.throw(thrown) if thrown is not None else self._work.send(send)
            except StopIteration as done:
                self._share.charge(self._timer() - began)
                return done.value  # type: ignore[no-any-return]
            except BaseException:
                self._share.charge(self._timer() - began)
                raise
            self._share.charge(self._timer() - began)
            try:
                send, thrown = (yield step), None
            except BaseException as exc:  # a cancellation: passed on to the work
                send, thrown = None, exc


class SingleFlight(Generic[T]):
    """One call of ``make`` at a time, shared: a caller arriving while one runs awaits its
    result (or its error) instead of starting another; the next caller after it ended starts
    a fresh one. A caller that gives up (cancelled) does not cancel the call the others
    await."""

    def __init__(self, make: Callable[[], Awaitable[T]]) -> None:
        self._make = make
        self._flight: asyncio.Task[T] | None = None
        self.started = 0
        """How many calls of ``make`` began (the fan-outs ``cluster.status`` made)."""

    async def __call__(self) -> T:
        flight = self._flight
        if flight is None or flight.done():
            flight = self._flight = asyncio.create_task(self._run())
            flight.add_done_callback(_retrieved)
            self.started += 1
        return await asyncio.shield(flight)

    async def _run(self) -> T:
        return await self._make()

    async def cancel(self) -> None:
        """Cancel a call in progress (at the service's stop)."""
        flight, self._flight = self._flight, None
        if flight is not None and not flight.done():
            flight.cancel()
            await asyncio.wait({flight})


def _retrieved(task: asyncio.Task[object]) -> None:
    """Mark a flight's error as seen: every waiter may have given up before it ended."""
    if not task.cancelled():
        task.exception()
