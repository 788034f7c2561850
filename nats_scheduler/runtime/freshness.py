"""Proving the Schedule table current with one leader read, for every Schedule at once.

Firing a due time needs the Schedule as it stands now, not as this process last heard of it:
a create decided on a stale view could start a Run after ``apply(enabled=False)`` returned
(runtime/firing.py, docs/architecture.md "Firing and pause visibility"). Reading each due
Schedule from the stream leader proves that, one request per due time: 10,000 requests when
10,000 Schedules share a minute.

The Schedule table is fed by an ordered consumer of the Schedule stream, so it holds every
Schedule event up to the consumer's position. One request to the stream leader for the
stream's last sequence, taken at instant ``t``, proves more than a read per Schedule: if the
consumer's position has reached that sequence, the table holds every Schedule event stored
before ``t``, for every Schedule. A firing then treats the table as a leader read taken at
``t``. When the consumer lags, :meth:`Freshness.confirm` waits briefly for it, and says
"unproven" if it does not catch up (the caller then reads the Schedule from the leader).

Confirmations are shared: callers that arrive while one is in flight wait for it, or for the
next one when they need a confirmation that started after they arrived (``since``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

from ..clock import Clock
from ..ports.schedules import ScheduleJournal

CATCH_UP_SECONDS = 0.1
"""How long a confirmation waits for the table's consumer to reach the leader's sequence."""

CATCH_UP_POLL = 0.005
"""Seconds between looks at the consumer's position while it catches up."""

AFTER_FAILURE_SECONDS = 1.0
"""After a confirmation the store could not answer, callers read from the leader at once for
this long instead of waiting for another confirmation to fail the same way."""


class Freshness:
    """Confirms the Schedule table current as of an instant, sharing each leader read.

    ``position``: the stream sequence the table's consumer has applied up to.
    """

    def __init__(self, schedules: ScheduleJournal, position: Callable[[], int],
                 clock: Clock) -> None:
        self._schedules = schedules
        self._position = position
        self._clock = clock
        self._inflight: asyncio.Future[datetime | None] | None = None
        self._inflight_started = float("-inf")
        self._last: tuple[float, datetime | None] = (float("-inf"), None)
        self._failed_until = float("-inf")
        self.confirmations = 0
        """Leader reads made (for benchmarks: compare with the number of firings)."""

    async def confirm(self, *, since: float | None = None,
                      reuse: float = 0.0) -> datetime | None:
        """The instant at which the table was proven to hold every stored Schedule event.

        None when it could not be proven (the consumer lags or the store failed). One in
        flight is joined; ``since`` (event-loop time): only a confirmation started at or
        after it will do. ``reuse``: a finished confirmation younger than this many seconds
        (by the event loop's time and by the clock) will do.
        """
        loop = asyncio.get_running_loop()
        if loop.time() < self._failed_until:
            return None
        started, proven = self._last
        if (reuse > 0 and proven is not None and started >= loop.time() - reuse
                and (since is None or started >= since)
                and (self._clock.now() - proven).total_seconds() <= reuse):
            return proven  # recent by the event loop's time and by the injected clock
        while True:
            inflight = self._inflight
            if inflight is not None and (since is None or self._inflight_started >= since):
                return await asyncio.shield(inflight)
            if inflight is None:
                return await self._run(loop)
            await asyncio.wait({inflight})  # it started too early for us: the next one

    async def _run(self, loop: asyncio.AbstractEventLoop) -> datetime | None:
        future: asyncio.Future[datetime | None] = loop.create_future()
        started = loop.time()
        self._inflight, self._inflight_started = future, started
        proven: datetime | None = None
        try:
            proven = await self._confirm_once(loop)
        except Exception:
            proven = None  # the store is struggling: the caller reads from the leader
            self._failed_until = loop.time() + AFTER_FAILURE_SECONDS
        finally:
            self._inflight = None
            future.set_result(proven)  # also when cancelled: nobody waits on it for ever
        self._last = (started, proven)
        self.confirmations += 1
        return proven

    async def _confirm_once(self, loop: asyncio.AbstractEventLoop) -> datetime | None:
        at = self._clock.now()
        last = await self._schedules.end_once()
        deadline = loop.time() + CATCH_UP_SECONDS
        while self._position() < last:
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(CATCH_UP_POLL)
        return at
