"""The next 24 hours as a heat strip: a row per hour, a cell per minute, herds in red.

Twelve text rows hold the 24 hours from the current one: each cell is a half block ``▀``
whose upper half is a minute of the even row's hour and whose lower half the same minute of
the next hour, so a whole day fits a 36-line terminal beside the hour's bars. A cell's
colour says how many are due in that minute, on a log scale up to the day's busiest minute;
a herd minute (more due than the live replicas start within the herd's lateness) is red,
minutes already past are blank. Pure rendering of the loaded answer.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from rich.style import Style
from rich.text import Text
from textual.widgets import Static

from nats_scheduler.admin.api import LoadAhead

from .steady import update_changed

HOURS = 24
SCALE = ("#1c2b3a", "#1f4e79", "#2a7ab0", "#3fa7d6", "#7fd1ae", "#e9d66b", "#f4a259")
"""Colours from "nothing due" (first) to "the day's busiest minute" (last)."""
HERD = "#ff3b30"
PAST = "#000000"
LABEL_WIDTH = 8


def _level(due: int, largest: int) -> int:
    """0 for none, else 1..len(SCALE)-1 on a log scale up to ``largest``."""
    if due <= 0 or largest <= 0:
        return 0
    top = len(SCALE) - 1
    if largest == 1:
        return top
    return max(1, min(top, 1 + round(math.log(due) / math.log(largest) * (top - 1))))


def strip_text(load: LoadAhead | None) -> Text:
    """The strip, its minute axis and its legend."""
    if load is None:
        return Text("loading…", style="dim")
    due = {m.minute: m.due for m in load.minutes}
    largest = max(due.values(), default=0)
    capacity = load.capacity
    first = load.start.replace(minute=0, second=0, microsecond=0)

    def colour(minute: datetime) -> str:
        if minute <= load.start or minute > load.end:
            return PAST
        n = due.get(minute, 0)
        if capacity is not None and n > capacity:
            return HERD
        return SCALE[_level(n, largest)]

    text = Text()
    axis = "".join(f":{m:02d}".ljust(10) for m in range(0, 60, 10))
    text.append(" " * LABEL_WIDTH + axis + "\n", style="dim")
    for pair in range(HOURS // 2):
        upper = first + timedelta(hours=2 * pair)
        lower = upper + timedelta(hours=1)
        text.append(f"{upper:%H}/{lower:%H}h ".rjust(LABEL_WIDTH), style="dim")
        for minute in range(60):
            top = colour(upper + timedelta(minutes=minute))
            bottom = colour(lower + timedelta(minutes=minute))
            text.append("▀", style=Style(color=top, bgcolor=bottom))
        text.append("\n")
    text.append(" " * LABEL_WIDTH, style="dim")
    text.append("none ", style="dim")
    for shade in SCALE[1:]:
        text.append("█", style=shade)
    text.append(f" {largest:,} due (the busiest minute)", style="dim")
    if capacity is not None:
        text.append("   ")
        text.append("█", style=HERD)
        text.append(f" herd: over {capacity:,}", style="dim")
    return text


class HeatStrip(Static):
    """The next 24 hours' load (:func:`strip_text`)."""

    def show(self, load: LoadAhead | None) -> None:
        update_changed(self, strip_text(load))
