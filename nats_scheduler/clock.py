"""Time, injected: nothing in the provider reads the wall clock directly.

The ticker, the dispatcher's backoff and the lease logic take a :class:`Clock`, so tests can
drive due times and retries with :class:`ManualClock` instead of waiting. Server-side timers
(NATS timeouts, KV TTLs) cannot be faked; the provider does not depend on any.

A running provider reads :class:`ServerClock`: the store's clock as this replica knows it
(docs/architecture.md, "One clock: the store's"), wrapped around the injected clock when
that one follows the wall clock (``follows_wall_time``); a :class:`ManualClock` is used as
it is, so tests keep driving time by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

from .core.serverclock import FRESH_SECONDS, HOLD_SECONDS, Estimate, OffsetEstimator, Sample


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


def elapsed_seconds(clock: Clock) -> float:
    """Seconds on the time :func:`sleep_for` waits by: the event loop's monotonic clock for
    a clock that can wait on elapsed time, the clock's own time for any other (an injected
    one, moved by hand). For periods measured between two looks, as ``sleep_for`` waits
    them."""
    if getattr(clock, "sleep", None) is not None:
        return asyncio.get_running_loop().time()
    return clock.now().timestamp()


class SystemClock:
    """The real clock: wall time from the OS, waits on the event loop."""

    follows_wall_time = True
    """A running provider corrects it to the store's clock (:class:`ServerClock`)."""

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


NAP_SECONDS = 1.0
"""A :class:`ServerClock` sleeper looks at the time at least this often: a new sample, the
estimate going stale or the inner clock stepping must not leave it asleep past its instant."""


class ServerClock:
    """The store's clock, never ahead of it: what a replica fires due times by.

    ``now()`` is the LOWER bound of the server's time (:mod:`.core.serverclock`): this
    replica's elapsed time plus the tightest offset its writes' server timestamps prove, so
    a due time is never fired before the server's clock has reached it, and is late by at
    most the bound's width (a round trip, a millisecond or two). The estimate is fed by
    :meth:`observe` (the presence beat, once a second). When the samples stop it goes on by
    the last estimate, its bound widened for drift, for ``hold`` seconds
    (:data:`~.core.serverclock.HOLD_SECONDS`); only before the first sample, or after that,
    is it the inner clock (the host's).
    """

    follows_wall_time = False  # already corrected: never wrapped twice

    def __init__(self, inner: Clock, *, elapsed: Callable[[], float] = time.monotonic,
                 fresh: float = FRESH_SECONDS, hold: float = HOLD_SECONDS,
                 estimator: OffsetEstimator | None = None, nap: float = NAP_SECONDS) -> None:
        self.inner = inner
        self._elapsed = elapsed
        self._nap = nap
        self._fresh = fresh
        self._hold = hold
        self.estimator = estimator or OffsetEstimator()
        self._sleepers: list[_Sleeper] = []
        """The sleepers: a new sample sets each one's timer again (or wakes it when its
        instant has come)."""

    @classmethod
    def wrap(cls, clock: Clock) -> Clock:
        """``clock`` corrected to the server's when it follows the wall clock, else itself.

        Elapsed time is the process's monotonic clock, or the wrapped clock's own
        (``elapsed``, a callable) when it has one, and so is the longest nap (``nap``): a
        simulated host's elapsed time is virtual, and it naps longer (fewer wakeups per
        simulated hour)."""
        if getattr(clock, "follows_wall_time", False):
            return cls(clock, elapsed=getattr(clock, "elapsed", time.monotonic),
                       nap=getattr(clock, "nap", NAP_SECONDS))
        return clock

    def observe(self, sample: Sample) -> None:
        """One write's timings and server stamp; each sleeper's timer set again by the new
        estimate, a sleeper whose instant has come woken (what the sleeper would do if woken
        to look again, without waking it: a sample every beat wakes no task)."""
        self.estimator.add(sample)
        for sleeper in self._sleepers:
            future = sleeper.future
            if future.done():
                continue
            delay = self._delay(sleeper.instant)
            sleeper.timer.cancel()
            if delay is None:
                future.set_result(None)
            else:
                sleeper.timer = future.get_loop().call_later(delay, _wake, future)

    def wall_seconds(self) -> float:
        """The inner (host) clock, seconds since the epoch: the other end of a sample."""
        return self.inner.now().timestamp()

    def estimate(self) -> Estimate | None:
        """The fresh estimate (for the offset people read), or None."""
        return self.estimator.estimate(self._elapsed(), fresh=self._fresh)

    def offset(self) -> float | None:
        """This host's clock minus the server's, seconds (positive: ahead); None if unknown."""
        estimate = self.estimate()
        return None if estimate is None else estimate.wall_offset

    def mark(self) -> float:
        """An instant on this replica's elapsed time, to be read later with :meth:`at`."""
        return self._elapsed()

    def at(self, mark: float) -> datetime:
        """The store's time at ``mark`` as this clock reads it now (the lower bound; the inner
        clock's when there is no fresh estimate): a "since when" taken before the first
        sample (a process's start) and corrected once the samples come."""
        return self.now() - timedelta(seconds=max(0.0, self._elapsed() - mark))

    def now(self) -> datetime:
        elapsed = self._elapsed()
        estimate = self.estimator.estimate(elapsed, fresh=self._hold)
        if estimate is None:
            return self.inner.now()
        return datetime.fromtimestamp(estimate.server_low(elapsed), UTC)

    async def sleep(self, seconds: float) -> None:
        """Elapsed time, like ``SystemClock.sleep`` (the inner clock's when it has one)."""
        await sleep_for(self.inner, seconds)

    def _delay(self, instant: datetime) -> float | None:
        """How long to sleep before looking again for ``instant``: None when it has come."""
        delay = (instant - self.now()).total_seconds()
        return None if delay <= 0 else min(delay, self._nap)

    async def sleep_until(self, instant: datetime) -> None:
        """Look at the time again at least every nap (``NAP_SECONDS``), and at the instant as
        a new sample puts it (:meth:`observe` sets the timer again): one future and one
        timer per look, no task (a sleeper per loop of a replica)."""
        delay = self._delay(instant)
        if delay is None:
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        sleeper = _Sleeper(instant, future, loop.call_later(delay, _wake, future))
        self._sleepers.append(sleeper)
        try:
            while True:
                await sleeper.future
                delay = self._delay(instant)
                if delay is None:
                    return
                sleeper.future = future = loop.create_future()
                sleeper.timer = loop.call_later(delay, _wake, future)
        finally:
            sleeper.timer.cancel()
            with contextlib.suppress(ValueError):
                self._sleepers.remove(sleeper)


class _Sleeper:
    """A :meth:`ServerClock.sleep_until` in progress: its instant, the future it awaits and
    the timer that resolves it."""

    __slots__ = ("future", "instant", "timer")

    def __init__(self, instant: datetime, future: asyncio.Future[None],
                 timer: asyncio.TimerHandle) -> None:
        self.instant = instant
        self.future = future
        self.timer = timer


def _wake(sleeper: asyncio.Future[None]) -> None:
    if not sleeper.done():
        sleeper.set_result(None)
