"""The herd: how many Schedules share their busiest minute, against what the replicas fire.

A platform where every hourly job says ``0 * * * *`` makes every one of them due in the same
minute. Replicas split a minute's due times among themselves (core/ownership.py), and each
starts them at a rate bounded by one core of Python (docs/architecture.md, "Firing at
scale"). ``nats-scheduler doctor`` compares the busiest minute of the next day with what the
live replicas start within :data:`HERD_LATENESS_SECONDS`, so an operator learns before the
top of the hour that the herd will spill. Pure: Schedules and ``now`` in, counts out.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from . import calendar
from .events import ScheduleRecord

HERD_LATENESS_SECONDS = 15.0
"""The lateness a busy minute's ``start_session`` calls are stated to stay within (p99)."""

FIRE_RATE_PER_REPLICA = 1_500.0
"""Runs one replica starts per second in a busy minute, at least: measured on a shared
2-core machine with ``sync_interval: always`` (bench/firing.py: 10,000 due in one minute
started within about 6 s on one replica). A faster host does better; this is the floor
the warning counts on."""

HORIZON = timedelta(hours=24)
"""How far ahead the busiest minute is looked for: a daily herd is found at any hour."""


def busiest_minute(schedules: Iterable[ScheduleRecord], now: datetime,
                   horizon: timedelta = HORIZON) -> tuple[datetime | None, int]:
    """The minute of the next ``horizon`` in which the most active Schedules are due, and
    how many. Schedules sharing a calendar (cron and time zone) are computed once."""
    calendars = Counter((record.cron, record.timezone) for record in schedules
                        if record.active)
    per_minute: Counter[datetime] = Counter()
    for (cron, timezone), count in calendars.items():
        try:
            dues = calendar.due_times(cron, timezone, now, now + horizon)
        except ValueError:
            continue  # a calendar the provider refuses to fire fires nothing
        for due in dues:
            per_minute[due] += count
    if not per_minute:
        return None, 0
    minute, count = max(per_minute.items(), key=lambda item: (item[1], -item[0].timestamp()))
    return minute, count


def herd_capacity(replicas: int, *, rate: float = FIRE_RATE_PER_REPLICA,
                  lateness: float = HERD_LATENESS_SECONDS) -> int:
    """Due times ``replicas`` live replicas start within ``lateness`` of their minute."""
    return int(max(replicas, 1) * rate * lateness)


def replicas_needed(due: int, *, rate: float = FIRE_RATE_PER_REPLICA,
                    lateness: float = HERD_LATENESS_SECONDS) -> int:
    """Live replicas (one core each) that start ``due`` Runs within ``lateness``."""
    return max(1, math.ceil(due / (rate * lateness)))


class Calendar(NamedTuple):
    """What Schedules share when they are due at the same instants: the cron expression and
    time zone, and the end of their hold when they are held until an instant."""

    cron: str
    timezone: str
    resumes: datetime | None = None


def calendars(records: Iterable[ScheduleRecord]) -> Counter[Calendar]:
    """How many Schedules fire on each calendar: the active ones, and the ones held until an
    instant (from that instant on). Disabled, held and deleted ones fire nothing."""
    counts: Counter[Calendar] = Counter()
    for record in records:
        if record.active:
            counts[Calendar(record.cron, record.timezone)] += 1
        elif (resumes := record.resumes_at) is not None:
            counts[Calendar(record.cron, record.timezone, resumes)] += 1
    return counts


_HOUR = 3600


class MinuteLoad:
    """Scheduled Runs due per minute over the next hours, from per-calendar counts.

    Schedules that share a calendar are expanded once, and each calendar's due times are
    kept for the hour they were computed in (a window of whole hours from the current one,
    wide enough for any request of at most ``max_hours``): a refresh within the hour costs
    one lookup and a few additions per calendar, never a calendar walk per Schedule. Pure
    (no clock: ``now`` is given); not thread-safe, one caller at a time.
    """

    def __init__(self, max_hours: int = 48) -> None:
        self.max_hours = max_hours
        self._hour: int | None = None
        self._dues: dict[tuple[str, str], tuple[int, ...]] = {}

    def _due(self, cron: str, timezone: str, hour: int) -> tuple[int, ...]:
        key = (cron, timezone)
        found = self._dues.get(key)
        if found is None:
            begin = datetime.fromtimestamp(hour, UTC)
            try:
                dues = calendar.due_times(cron, timezone, begin - timedelta(microseconds=1),
                                          begin + timedelta(hours=self.max_hours + 1))
            except ValueError:
                dues = []  # a calendar the provider refuses to fire fires nothing
            found = self._dues[key] = tuple(int(due.timestamp()) for due in dues)
        return found

    def count(self, counts: Mapping[Calendar, int], now: datetime, hours: int
              ) -> Counter[datetime]:
        """Due times per minute strictly after ``now`` and up to ``hours`` later (the
        minute's UTC instant -> how many Runs are due then)."""
        if not 1 <= hours <= self.max_hours:
            raise ValueError(f"the load ahead covers 1 to {self.max_hours} hours, not {hours}")
        start = now.timestamp()
        hour = int(start) // _HOUR * _HOUR
        if hour != self._hour:
            self._hour, self._dues = hour, {}
        end = start + hours * _HOUR
        per_minute: Counter[int] = Counter()
        for (cron, timezone, resumes), count in counts.items():
            dues = self._due(cron, timezone, hour)
            lo = bisect.bisect_right(dues, start)
            if resumes is not None:
                lo = max(lo, bisect.bisect_left(dues, resumes.timestamp()))
            for ts in dues[lo:bisect.bisect_right(dues, end)]:
                per_minute[ts] += count
        return Counter({datetime.fromtimestamp(ts, UTC): n for ts, n in per_minute.items()})
