"""The next hour, minute by minute: one bar per minute, herd minutes in red.

A column per minute (60 of them), eight text rows of eighth blocks (64 heights), the
busiest minute of the hour full height; a minute with more due than the live replicas start
within the herd's lateness (``LoadAhead.capacity``) is red and marked under the axis. Pure
rendering of the answer the screen loaded: drawing costs the same whatever the number of
Schedules behind it.
"""

from __future__ import annotations

from datetime import timedelta

from rich.text import Text
from textual.widgets import Static

from nats_scheduler.admin.api import LoadAhead, LoadMinute

from .steady import update_changed

ROWS = 8
MINUTES = 60
BLOCKS = " ▁▂▃▄▅▆▇█"
BAR_STYLE = "bold cyan"
HERD_STYLE = "bold red"
LABEL_WIDTH = 8


def hour_ahead(load: LoadAhead) -> list[LoadMinute]:
    """The 60 minutes after the load's start with how many are due in each (0: none)."""
    first = (load.start + timedelta(minutes=1)).replace(second=0, microsecond=0)
    due = {m.minute: m.due for m in load.minutes}
    return [LoadMinute(minute=minute, due=due.get(minute, 0))
            for minute in (first + timedelta(minutes=i) for i in range(MINUTES))]


def bars_text(load: LoadAhead | None) -> Text:
    """The chart: a scale on the left, the bars, the minute axis and the herd marks."""
    if load is None:
        return Text("loading…", style="dim")
    minutes = hour_ahead(load)
    largest = max(m.due for m in minutes)
    capacity = load.capacity
    heights = [max(1, round(m.due / largest * ROWS * 8)) if m.due else 0 for m in minutes]
    text = Text()
    for row in range(ROWS, 0, -1):
        label = f"{largest:,}" if row == ROWS else ("0" if row == 1 else "")
        text.append(label.rjust(LABEL_WIDTH - 1) + "┤", style="dim")
        for minute, height in zip(minutes, heights, strict=True):
            level = min(8, max(0, height - (row - 1) * 8))
            herd = capacity is not None and minute.due > capacity
            text.append(BLOCKS[level], style=HERD_STYLE if herd else BAR_STYLE)
        text.append("\n")
    text.append(" " * (LABEL_WIDTH - 1) + "└" + "─" * MINUTES + "\n", style="dim")
    axis = [" "] * MINUTES
    for i, m in enumerate(minutes):
        if m.minute.minute % 10 == 0 and i + 5 <= MINUTES:
            axis[i:i + 5] = list(f"{m.minute:%H:%M}")
    text.append(" " * LABEL_WIDTH + "".join(axis) + "  UTC", style="dim")
    marks = "".join("▲" if capacity is not None and m.due > capacity else " "
                    for m in minutes)
    if marks.strip():
        text.append("\n" + " " * LABEL_WIDTH + marks + "  herd", style=HERD_STYLE)
    return text


class MinuteBars(Static):
    """The next hour's load (:func:`bars_text`)."""

    def show(self, load: LoadAhead | None) -> None:
        update_changed(self, bars_text(load))
