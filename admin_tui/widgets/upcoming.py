"""The next due times of a Schedule, on its wall clock and in UTC, DST days marked."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text

from nats_scheduler.admin.api import ScheduleDetail

from ..formatting import DASH, relative, zone_short
from .keyed_table import KeyedTable

COLUMNS = (
    ("n", "#", 2),
    ("local", "Due (zone)", 16),
    ("utc", "UTC", 5),
    ("in", "In", 14),
    ("dst", "DST", None),
)


class UpcomingTable(KeyedTable):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(COLUMNS, **kwargs)
        self.cursor_type = "none"

    def show(self, detail: ScheduleDetail | None, now: datetime) -> None:
        if detail is None:
            self.set_rows([])
            return
        zone = detail.schedule.timezone
        notes = list(detail.dst_notes) + [None] * len(detail.upcoming)
        rows = []
        for i, due in enumerate(detail.upcoming):
            note = notes[i]
            rows.append((str(i), [
                Text(str(i + 1), style="dim"),
                Text(zone_short(due, zone), style="bold yellow" if note else ""),
                Text(due.strftime("%H:%M")),
                Text(relative(due, now)),
                Text(note, style="yellow") if note else Text(DASH, style="dim"),
            ]))
        self.set_rows(rows)
