"""How many requests of each endpoint the admin service answers at once, and what it says past
that: the busy answer, given at once, never a silence.

nats-py 2.16 runs a subscription's handler one message at a time (``nats.micro`` endpoints
included): a slow endpoint queued every request behind the one running, and under a flood
its callers timed out with no answer at all (``cluster.status``: a fan-out to every replica
then a read of the leases, some 0.2 s each, 950 of 1,000 unanswered). The binding now
answers each request in a task of its own (``jetstream/admin_transport.py``), at most
:data:`ENDPOINT_LIMITS` at once per endpoint in this process; a request past the limit is
answered at once with ``unavailable`` and ``retry_after`` (:func:`busy_error`), having done
nothing, so asking again is always safe. ``cluster.status`` callers share one fan-out
(:class:`SingleFlight`), so its limit only bounds the waiters.

The limits are small on purpose: the service runs in the replica's event loop, beside the
firing; a handler that walks the Schedule table (``health``, ``schedules.load``) holds the
loop while it runs, so more of them at once would only make a due time start later.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from .api import AdminError, ErrorCode

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

BUSY_MESSAGE = "the scheduler is busy: try again in a moment"

BUSY_RETRY_AFTER = 0.2
"""Seconds a busy answer asks the client to wait before asking again."""


def busy_error() -> AdminError:
    """The answer past an endpoint's limit: ``unavailable``, nothing done, ask again later."""
    return AdminError(ErrorCode.UNAVAILABLE, BUSY_MESSAGE, retry_after=BUSY_RETRY_AFTER)


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
            with contextlib.suppress(BaseException):
                await flight


def _retrieved(task: asyncio.Task[object]) -> None:
    """Mark a flight's error as seen: every waiter may have given up before it ended."""
    if not task.cancelled():
        task.exception()
