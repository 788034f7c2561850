"""The herd: how many Schedules share their busiest minute, against what the replicas fire.

A platform where every hourly job says ``0 * * * *`` makes every one of them due in the same
minute. Replicas split a minute's due times among themselves (core/ownership.py), and each
starts them at a rate bounded by one core of Python (docs/architecture.md, "Firing at
scale"). ``nats-scheduler doctor`` compares the busiest minute of the next day with what the
live replicas start within :data:`HERD_LATENESS_SECONDS`, so an operator learns before the
top of the hour that the herd will spill. Pure: Schedules and ``now`` in, counts out.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta

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
