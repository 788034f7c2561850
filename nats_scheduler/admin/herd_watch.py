"""The busiest minute of the next day, as ``health`` reports it: computed now and then.

``nats-scheduler doctor`` warns when more Schedules share one minute than the live replicas
start within the stated lateness (``core/herd.py``). ``status`` says the same, from the
answering replica's Schedule table, so that the warning is seen where operators look every
day. Finding the minute costs one calendar walk over the next 24 h per distinct calendar
(cron and time zone): off the event loop, and at most once per ``REFRESH_SECONDS``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

from ..core.events import ScheduleRecord
from ..core.herd import busiest_minute

REFRESH_SECONDS = 300.0
"""How long one answer is reused: a herd forms over days of Schedule changes, not seconds."""


class BusiestMinute:
    """The busiest minute and how many Schedules are due in it, reused for a while."""

    def __init__(self, *, refresh: float = REFRESH_SECONDS) -> None:
        self._refresh = refresh
        self._answer: tuple[datetime | None, int] = (None, 0)
        self._at: float | None = None
        self._count = -1

    async def get(self, records: Sequence[ScheduleRecord], now: datetime
                  ) -> tuple[datetime | None, int]:
        """The cached answer for ``records`` (the live Schedules, read once by the caller),
        computed again (in a thread) once it is ``refresh`` old or their number changed (a
        replica that just loaded its table answers at once)."""
        loop = asyncio.get_running_loop()
        if (self._at is None or len(records) != self._count
                or loop.time() - self._at >= self._refresh):
            self._count = len(records)
            self._answer = await asyncio.to_thread(busiest_minute, list(records), now)
            self._at = loop.time()
        return self._answer
