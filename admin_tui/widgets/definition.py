"""A Schedule's definition as AstraBox applied it, plus the operator hold."""

from __future__ import annotations

from datetime import datetime

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from nats_scheduler.admin.api import ScheduleView
from nats_scheduler.admin.callers import held_by

from ..formatting import hold_end, relative, styled, utc


def definition_table(s: ScheduleView, now: datetime) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", justify="right")
    grid.add_column()
    hold = s.hold
    rows: list[tuple[str, Text | str]] = [
        ("Name", Text(s.name, style="bold")),
        ("Deployment", Text(s.deployment_id, style="cyan")),
        ("Cron", s.cron),
        ("Time zone", s.timezone),
        ("State", styled(s.state)),
        ("Enabled", "yes" if s.enabled else "no (AstraBox disabled it)"),
        ("Held", Text(f"by {held_by(hold)} at {utc(hold.at)} ({relative(hold.at, now)})\n"
                      + (f"ends{hold_end(hold, now)}\n" if hold.until else "")
                      + f"why: {hold.reason}", style="yellow") if hold else Text("no", "dim")),
        ("Target", s.payload.target),
        ("Prompt", Text(s.payload.prompt, overflow="ellipsis", no_wrap=True)),
        ("Version", str(s.version)),
        ("Updated", f"{relative(s.updated_at, now)} · {s.updated_at:%m-%d %H:%MZ}"),
    ]
    for label, value in rows:
        grid.add_row(label, value)
    return grid


class DefinitionPanel(Static):
    def show(self, schedule: ScheduleView | None, now: datetime) -> None:
        self.update(definition_table(schedule, now) if schedule else Text("loading…", "dim"))
