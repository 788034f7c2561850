"""An asyncio event loop on virtual time: a simulated day runs in seconds, the same every time.

Nothing in the simulation does real I/O (the store is in memory), so whenever no callback is
ready the loop need not wait: it jumps its clock to the next timer. ``loop.time()``,
``asyncio.sleep``, ``call_later`` and ``wait_for`` all follow that clock; so does
:class:`SimClock`, the wall clock the simulated replicas read (plus each replica's own skew).

Determinism: callbacks run in the order asyncio's ready queue and timer heap give them,
which depends only on what was scheduled, in which order, for which instant; the simulation
draws every other choice (latencies, faults, handler outcomes) from one seeded generator.
Python's string hashing would change set iteration between processes, so the simulation's
entry point fixes ``PYTHONHASHSEED`` (``__main__.py``).
"""

from __future__ import annotations

import asyncio
import selectors
from datetime import UTC, datetime, timedelta
from typing import Any

EPOCH = datetime(2030, 1, 1, tzinfo=UTC)
"""The wall-clock instant of virtual time 0."""


class _IdleSelector(selectors.DefaultSelector):
    """A selector that never blocks: there is no real I/O to wait for."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._vloop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(0)
        if not ready and timeout is not None and timeout > 0:
            self._vloop.advance(timeout)
        elif not ready and timeout is None:
            raise RuntimeError("the simulation is idle: nothing is scheduled any more")
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose ``time()`` only moves when nothing is ready."""

    def __init__(self) -> None:
        self._virtual = 0.0
        super().__init__(_IdleSelector(self))

    def time(self) -> float:
        return self._virtual

    def advance(self, seconds: float) -> None:
        self._virtual += seconds


class SimClock:
    """The wall clock of one simulated host: virtual time, plus a skew that may be stepped.

    ``follows_wall_time``: a running provider wraps it in its ``ServerClock`` (the store's
    clock as the replica measures it), exactly as it wraps a real host's clock.
    """

    follows_wall_time = True
    nap = 5.0
    """The longest a ``ServerClock`` sleeper waits before it looks again (1 s on a real
    host): a new sample wakes it anyway, and fewer wakeups make a simulated hour cheaper."""

    def __init__(self, skew: float = 0.0) -> None:
        self.skew = skew

    def now(self) -> datetime:
        return EPOCH + timedelta(seconds=asyncio.get_running_loop().time() + self.skew)

    @staticmethod
    def elapsed() -> float:
        """The host's monotonic time: virtual, unskewed (``ServerClock.wrap`` uses it)."""
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def sleep_until(self, instant: datetime) -> None:
        while True:
            delay = (instant - self.now()).total_seconds()
            if delay <= 0:
                return
            await asyncio.sleep(delay + 1e-6)


class StoreClock:
    """The store's own clock: virtual time without skew (what stamps every write)."""

    follows_wall_time = False

    def now(self) -> datetime:
        return EPOCH + timedelta(seconds=asyncio.get_running_loop().time())

    async def sleep_until(self, instant: datetime) -> None:
        delay = (instant - self.now()).total_seconds()
        await asyncio.sleep(max(0.0, delay))
