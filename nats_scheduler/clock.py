"""Time, injected: nothing in the provider reads the wall clock directly.

The ticker, the dispatcher's backoff and the lease logic take a :class:`Clock`, so tests can
drive due times and retries with :class:`ManualClock` instead of waiting. Server-side timers
(NATS timeouts, KV TTLs) cannot be faked; the provider does not depend on any.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """A source of aware-UTC time and a way to wait for an instant."""

    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""
        ...

    async def sleep_until(self, instant: datetime) -> None:
        """Return once ``now() >= instant`` (at once if it already is)."""
        ...


async def sleep_for(clock: Clock, seconds: float) -> None:
    """Wait ``seconds`` of elapsed time: for periods (lease renewals, sweeps), not instants.

    A step of the wall clock (NTP, an operator fixing the time) must neither stretch nor
    skip a period, so a clock that can wait on elapsed time (``SystemClock.sleep``: the
    event loop's monotonic clock) does; any other clock waits until ``now() + seconds``.
    """
    sleep = getattr(clock, "sleep", None)
    if sleep is not None:
        await sleep(seconds)
    else:
        await clock.sleep_until(clock.now() + timedelta(seconds=seconds))


class SystemClock:
    """The real clock: wall time from the OS, waits on the event loop."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of monotonic time (a wall-clock step changes nothing)."""
        await asyncio.sleep(max(0.0, seconds))

    async def sleep_until(self, instant: datetime) -> None:
        # Re-check after each wake: the loop's monotonic clock and the wall clock can drift
        # (NTP slews), and waking early must never fire a due time before it is due.
        while True:
            delay = (instant - self.now()).total_seconds()
            if delay <= 0:
                return
            await asyncio.sleep(min(delay, 60.0) + 0.001)


class ManualClock:
    """A clock tests move by hand. It can jump forward but never goes backwards.

    Sleepers wake when :meth:`advance` or :meth:`set` passes their instant.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self._sleepers: list[tuple[datetime, int, asyncio.Future[None]]] = []
        self._counter = itertools.count()

    def now(self) -> datetime:
        return self._now

    async def sleep_until(self, instant: datetime) -> None:
        if instant <= self._now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (instant, next(self._counter), future))
        await future

    def advance(self, delta: timedelta | float) -> None:
        """Move forward by ``delta`` (seconds or a timedelta) and wake whoever is due."""
        if isinstance(delta, (int, float)):
            delta = timedelta(seconds=delta)
        self.set(self._now + delta)

    def set(self, instant: datetime) -> None:
        """Jump to ``instant`` (not earlier than now) and wake whoever is due."""
        if instant < self._now:
            raise ValueError("ManualClock never goes backwards")
        self._now = instant
        while self._sleepers and self._sleepers[0][0] <= instant:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    @property
    def sleepers(self) -> int:
        """How many tasks wait on this clock (tests use it to know a loop is parked)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())
