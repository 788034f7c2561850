"""``schedules --load``: the scheduled Runs due in each minute ahead, as text.

The answer is the admin service's ``schedules.load`` (admin/load.py). Up to two hours are
shown minute by minute, longer windows hour by hour with each hour's busiest minute; either
way the herd minutes (more due than the live replicas start within the herd's stated
lateness) are named first, and a bar beside each row draws its share of the busiest.
``--json`` prints ``{"minutes": [{"minute", "due"}, ...]}`` instead (minutes with none left
out).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import NamedTuple

from ..admin.api import LoadAhead, LoadMinute
from ..admin.load import herd_text
from .common import table, when

BAR_WIDTH = 30
MINUTE_ROWS_UP_TO_HOURS = 2
"""Windows up to this long are listed minute by minute; longer ones hour by hour."""


def _bar(due: int, largest: int) -> str:
    """``███▌``: ``due`` against ``largest`` in eighths of a character."""
    if due <= 0 or largest <= 0:
        return ""
    eighths = max(1, round(due / largest * BAR_WIDTH * 8))
    full, part = divmod(eighths, 8)
    return "█" * full + ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")[part]


class _Hour(NamedTuple):
    """One hour of the window: how many are due in it, and its busiest minute."""

    hour: datetime
    due: int
    busiest: LoadMinute


def _hours(minutes: list[LoadMinute]) -> list[_Hour]:
    """Every hour with a due time, in order."""
    grouped: dict[datetime, list[LoadMinute]] = defaultdict(list)
    for minute in minutes:
        grouped[minute.minute.replace(minute=0)].append(minute)
    return [_Hour(hour, sum(m.due for m in group),
                  max(group, key=lambda m: (m.due, -m.minute.timestamp())))
            for hour, group in sorted(grouped.items())]


def load_text(load: LoadAhead) -> str:
    """The load ahead as an operator reads it: the window, the herds, then the rows."""
    hours = round((load.end - load.start).total_seconds() / 3600)
    total = sum(m.due for m in load.minutes)
    lines = [f"due ahead: {when(load.start)} to {when(load.end)} ({hours} h): {total:,} "
             f"scheduled Runs in {len(load.minutes):,} minutes"]
    if load.capacity is None:
        lines.append("no scheduler process answered (read from the store): herds not judged")
    else:
        replicas = load.replicas or 1
        lines.append(f"{replicas} live replica{' starts' if replicas == 1 else 's start'} about "
                     f"{load.capacity:,} within {load.lateness:g} s of a minute "
                     f"({load.rate:,.0f} a second each): a minute with more due is a herd")
    herds = load.herds()
    lines.append(f"herd minutes: {len(herds)}" if herds else "herd minutes: none")
    lines += [f"  {herd_text(minute, load)}" for minute in herds[:20]]
    if len(herds) > 20:
        lines.append(f"  ... and {len(herds) - 20} more")
    if not load.minutes:
        return "\n".join(lines)
    lines.append("")
    capacity = load.capacity
    if hours <= MINUTE_ROWS_UP_TO_HOURS:
        largest = max(m.due for m in load.minutes)
        rows = [[f"{m.minute:%Y-%m-%d %H:%M}", f"{m.due:,}",
                 "herd" if capacity is not None and m.due > capacity else "",
                 _bar(m.due, largest)] for m in load.minutes]
        lines.append(table(["MINUTE (UTC)", "DUE", "", ""], rows))
    else:
        per_hour = _hours(load.minutes)
        largest = max(h.due for h in per_hour)
        rows = [[f"{h.hour:%Y-%m-%d %H:00}", f"{h.due:,}", f"{h.busiest.minute:%H:%M}",
                 f"{h.busiest.due:,}",
                 "herd" if capacity is not None and h.busiest.due > capacity else "",
                 _bar(h.due, largest)] for h in per_hour]
        lines.append(table(["HOUR (UTC)", "DUE", "BUSIEST", "DUE THEN", "", ""], rows))
    return "\n".join(lines)
