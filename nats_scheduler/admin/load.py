"""The load ahead: how many scheduled Runs are due in each minute of the next hours.

``schedules.load`` of the admin service answers it from the replica's Schedule table; the
console's load view and ``nats-scheduler schedules --load`` draw it. A minute where more are
due than the live replicas start within the herd's stated lateness is a herd
(``core/herd.py``: the figure ``status`` and ``doctor`` warn by), and is named as one.

What it costs at 100,000 Schedules: the Schedules are counted per calendar (cron, time zone
and, for a hold with an end, that end) once per answer, and each calendar's due times are
expanded once an hour (:class:`~nats_scheduler.core.herd.MinuteLoad`), so an answer costs
a pass over the table and a few additions per calendar, in a thread: the replica's event
loop keeps firing meanwhile. Without a replica (read from the store) nothing is a herd:
there is no live replica to compare with.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from ..core.events import ScheduleRecord
from ..core.herd import (
    FIRE_RATE_PER_REPLICA,
    HERD_LATENESS_SECONDS,
    MinuteLoad,
    calendars,
    herd_capacity,
)
from ..core.validation import MAX_LOAD_HOURS
from .api import LoadAhead, LoadMinute

MAX_HOURS = MAX_LOAD_HOURS
"""The farthest a load answer looks ahead (``core/validation.py``)."""


class LoadCounter:
    """Answers load requests from Schedule records, keeping the due times it expanded for
    the hour (one per admin service: every answer of that hour reuses them)."""

    def __init__(self) -> None:
        self._minutes = MinuteLoad(max_hours=MAX_HOURS)
        self._lock = threading.Lock()

    def count(self, records: Sequence[ScheduleRecord], now: datetime, hours: int, *,
              replicas: int | None, rate: float = FIRE_RATE_PER_REPLICA) -> LoadAhead:
        """The load of ``records`` over the ``hours`` after ``now``; ``replicas``: how many
        live replicas share a minute (None: unknown, so no minute is called a herd)."""
        if isinstance(hours, bool) or not 1 <= hours <= MAX_HOURS:
            raise ValueError(f"the load ahead covers 1 to {MAX_HOURS} hours, not {hours}")
        counts = calendars(records)
        with self._lock:  # the expanded due times are shared by the answers of the hour
            per_minute = self._minutes.count(counts, now, hours)
        minutes = [LoadMinute(minute=minute, due=due) for minute, due in sorted(per_minute.items())]
        capacity = None if replicas is None else herd_capacity(replicas, rate=rate)
        return LoadAhead(minutes=minutes, start=now, end=now + timedelta(hours=hours),
                         replicas=replicas, rate=rate, lateness=HERD_LATENESS_SECONDS,
                         capacity=capacity)

    async def answer(self, records: Sequence[ScheduleRecord], now: datetime, hours: int, *,
                     replicas: int | None, rate: float = FIRE_RATE_PER_REPLICA,
                     charge: Callable[[float], None] | None = None) -> LoadAhead:
        """:meth:`count` in a thread (``records``: read once by the caller, on its loop);
        ``charge`` is told the CPU seconds the thread took (it holds the interpreter the
        event loop needs: the admin service's loop share counts it)."""
        def timed() -> tuple[LoadAhead, float]:
            began = time.thread_time()
            load = self.count(records, now, hours, replicas=replicas, rate=rate)
            return load, time.thread_time() - began

        load, seconds = await asyncio.to_thread(timed)
        if charge is not None:
            charge(seconds)
        return load


def herd_text(minute: LoadMinute, load: LoadAhead) -> str:
    """A herd minute named: ``12:00 UTC: 41,300 due: 1.8x what 1 live replica starts within
    15 s at the measured 1,500 a second each`` (``tomorrow`` after the time when it is)."""
    replicas = load.replicas or 1
    capacity = load.capacity or 1
    who = "1 live replica starts" if replicas == 1 else f"{replicas} live replicas start"
    day = " tomorrow" if minute.minute.date() > load.start.date() else ""
    return (f"{minute.minute:%H:%M} UTC{day}: {minute.due:,} due: "
            f"{minute.due / capacity:.1f}x "
            f"what {who} within {load.lateness:g} s at the measured {load.rate:,.0f} a "
            "second each")
