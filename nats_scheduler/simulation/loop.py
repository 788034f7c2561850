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
import collections
import contextvars
import heapq
import itertools
import selectors
from collections.abc import Callable
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


_CLEAN_AT = 100
"""Cancelled timers tolerated in the heap (and at least half of it) before it is rebuilt
without them, as asyncio's own loop does."""


class _Handle(asyncio.Handle):
    """asyncio's ``Handle``, made without its debug checks (the loop is never in debug
    mode: a simulated hour makes some 90,000 of them)."""

    __slots__ = ()

    def __init__(self, callback: Callable[..., object], args: tuple[Any, ...],
                 loop: asyncio.AbstractEventLoop, context: contextvars.Context | None) -> None:
        _fill(self, callback, args, loop, context)


def _fill(handle: asyncio.Handle, callback: Callable[..., object], args: tuple[Any, ...],
          loop: asyncio.AbstractEventLoop, context: contextvars.Context | None) -> None:
    """What ``Handle.__init__`` sets, without its debug-mode checks."""
    handle._context = contextvars.copy_context() if context is None else context  # type: ignore[attr-defined]
    handle._loop = loop  # type: ignore[attr-defined]
    handle._callback = callback  # type: ignore[attr-defined]
    handle._args = args  # type: ignore[attr-defined]
    handle._cancelled = False  # type: ignore[attr-defined]
    handle._repr = None  # type: ignore[attr-defined]
    handle._source_traceback = None  # type: ignore[attr-defined]


class _Timer(asyncio.TimerHandle):
    """asyncio's ``TimerHandle``, made as :class:`_Handle` is."""

    __slots__ = ()

    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...],
                 loop: asyncio.AbstractEventLoop, context: contextvars.Context | None) -> None:
        _fill(self, callback, args, loop, context)
        self._when = when
        self._scheduled = True


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose ``time()`` only moves when nothing is ready.

    Its step (``_run_once``) is asyncio's, less what virtual time makes idle, because a
    simulated hour is some 50,000 steps: no poll of the selector while a timer or a callback
    is pending (nothing in the simulation does I/O; a thread's callback is queued by
    ``call_soon_threadsafe`` itself, the poll only drains the wake-up byte), and timers kept
    in the heap as ``(when, order, handle)``, so the heap compares floats in C instead of
    calling ``TimerHandle.__lt__``; timers of one instant run in the order they were armed
    (asyncio leaves that order to the heap's shape); handles made without the checks of
    debug mode (``call_soon``, ``call_later``, ``call_at``), which it never runs in; and
    one call of the step runs asyncio's steps until no callback is ready (each as asyncio
    runs it: the callbacks ready at its start, after the timers due; time cannot move while
    one is ready), so a timer's callback and the task it wakes are one call, not two.
    """

    def __init__(self) -> None:
        self._virtual = 0.0
        self._armed = itertools.count()
        super().__init__(_IdleSelector(self))

    def time(self) -> float:
        return self._virtual

    def advance(self, seconds: float) -> None:
        self._virtual += seconds

    def call_soon(self, callback: Callable[..., object], *args: Any,
                  context: contextvars.Context | None = None) -> asyncio.Handle:
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        handle = _Handle(callback, args, self, context)
        self._ready.append(handle)  # type: ignore[attr-defined]
        return handle

    def call_at(self, when: float, callback: Callable[..., object], *args: Any,
                context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        timer = _Timer(when, callback, args, self, context)
        heapq.heappush(self._scheduled, (when, next(self._armed), timer))  # type: ignore
        return timer

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any,
                   context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        if delay is None:
            raise TypeError("delay must not be None")
        return self.call_at(self._virtual + delay, callback, *args, context=context)

    def _run_once(self) -> None:
        scheduled: list[tuple[float, int, asyncio.TimerHandle]] = self._scheduled  # type: ignore
        if (len(scheduled) > _CLEAN_AT
                and self._timer_cancelled_count * 2 > len(scheduled)):  # type: ignore
            kept = []
            for entry in scheduled:
                if entry[2]._cancelled:  # type: ignore[attr-defined]
                    entry[2]._scheduled = False  # type: ignore[attr-defined]
                else:
                    kept.append(entry)
            heapq.heapify(kept)
            self._scheduled = scheduled = kept  # type: ignore[attr-defined]
            self._timer_cancelled_count = 0
        else:
            while scheduled and scheduled[0][2]._cancelled:  # type: ignore[attr-defined]
                self._timer_cancelled_count -= 1
                heapq.heappop(scheduled)[2]._scheduled = False  # type: ignore[attr-defined]
        ready: collections.deque[asyncio.Handle] = self._ready  # type: ignore[attr-defined]
        if not ready and not self._stopping:  # type: ignore[attr-defined]
            if not scheduled:  # a thread's callback at most: asyncio's own step
                self._process_events(self._selector.select(None))  # type: ignore
            elif scheduled[0][0] > self._virtual:
                self._virtual = scheduled[0][0]  # jump to the next timer
        now = self._virtual
        while True:  # asyncio's next steps, while callbacks are ready: time stands still
            while scheduled and scheduled[0][0] <= now:
                timer = heapq.heappop(scheduled)[2]
                timer._scheduled = False  # type: ignore[attr-defined]
                ready.append(timer)
            for _ in range(len(ready)):
                handle = ready.popleft()
                if not handle._cancelled:  # type: ignore[attr-defined]
                    handle._run()  # type: ignore[attr-defined]
            if not ready or self._stopping:  # type: ignore[attr-defined]
                break
        handle = None  # type: ignore[assignment]  # no cycle through an exception


class SimClock:
    """The wall clock of one simulated host: virtual time, plus a skew that may be stepped.

    ``follows_wall_time``: a running provider wraps it in its ``ServerClock`` (the store's
    clock as the replica measures it), exactly as it wraps a real host's clock.
    """

    follows_wall_time = True
    nap = 10.0
    """The longest a ``ServerClock`` sleeper waits before it looks again (1 s on a real
    host): two presence beats (``Cluster.beat_seconds``), so that a sleeper's nap ends only
    when the samples stop (a pause, an outage). Each sample sets the sleepers' timers again
    from that moment: a nap as long as the beat ran out just before every beat (the beat
    comes a round trip after its period), a look at the time that changed nothing."""

    def __init__(self, skew: float = 0.0, time: Callable[[], float] | None = None) -> None:
        self.skew = skew
        self.elapsed: Callable[[], float] = time or _running_loop_time
        """The host's monotonic time: virtual, unskewed (``ServerClock.wrap`` uses it).
        ``time``: the loop's ``time`` (else the running loop's is looked up at each read, a
        system call: ``get_running_loop`` checks the process ID)."""

    def now(self) -> datetime:
        return EPOCH + timedelta(seconds=self.elapsed() + self.skew)

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

    def __init__(self, time: Callable[[], float] | None = None) -> None:
        self._time = time or _running_loop_time
        """The loop's ``time``, as for :class:`SimClock`."""

    def now(self) -> datetime:
        return EPOCH + timedelta(seconds=self._time())

    async def sleep_until(self, instant: datetime) -> None:
        delay = (instant - self.now()).total_seconds()
        await asyncio.sleep(max(0.0, delay))


def _running_loop_time() -> float:
    return asyncio.get_running_loop().time()
