"""Clocks a test moves: ``OffsetClock`` for wall time, ``ManualElapsed`` for elapsed time.

``OffsetClock`` is the system clock plus an offset a test can step, for clock-jump faults.

A replica process (:mod:`.replica`) takes it as its provider's ``clock`` so that a test can
step that replica's time forward or back by minutes (an NTP step, a host whose clock was
wrong and gets corrected) while the others keep the true time.

Sleepers re-evaluate their instant at once when the offset changes: a forward step makes
every instant it passed due immediately, the adversarial reading of a step (a timer on the
real-time clock fires at once on a forward step; the provider's own ``SystemClock`` notices
it at its next wake-up, within a minute). A backward step makes sleepers wait longer.

``ManualElapsed`` stands in for ``time.monotonic`` where the provider takes an ``elapsed``
callable (leases, presence, the server clock's estimate): those judge time on elapsed
seconds, never by comparing wall clocks, so a test moves it by hand to cross a bound exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta


class ManualElapsed:
    """Elapsed seconds that move only when the test moves them (``elapsed.value += 2.9``)."""

    def __init__(self, start: float = 100.0) -> None:
        self.value = start

    def __call__(self) -> float:
        return self.value


class OffsetClock:
    """Wall time from the OS plus :attr:`offset`; :meth:`step` changes it."""

    follows_wall_time = True
    """A host's wall clock, wrong by ``offset``: the provider corrects it to the store's."""

    def __init__(self, offset_seconds: float = 0.0) -> None:
        self.offset = timedelta(seconds=offset_seconds)
        self._stepped = asyncio.Event()

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def step(self, seconds: float) -> timedelta:
        """Move this clock by ``seconds`` (negative: back); returns the new offset."""
        self.offset += timedelta(seconds=seconds)
        event, self._stepped = self._stepped, asyncio.Event()
        event.set()  # wake every sleeper to look at the new time
        return self.offset

    async def sleep(self, seconds: float) -> None:
        """Elapsed time, like ``SystemClock.sleep``: a step changes nothing."""
        await asyncio.sleep(max(0.0, seconds))

    async def sleep_until(self, instant: datetime) -> None:
        while True:
            delay = (instant - self.now()).total_seconds()
            if delay <= 0:
                return
            stepped = self._stepped
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stepped.wait(), min(delay, 60.0) + 0.001)
