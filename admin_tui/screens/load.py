"""The load ahead: scheduled Runs due in each minute of the next hour and the next 24 hours.

One answer of the admin service (``schedules.load``, counted per calendar in the replica:
nats_scheduler/admin/load.py) feeds the whole view: the hour's bars, the day's heat strip and
the herd minutes, each named ("13:00 UTC: 41,300 due: 1.8x what 1 live replica starts
within 15 s ..."). The console draws it; the number of Schedules behind it costs the
replica, not the console.

Reloaded when a Schedule changes (a hold moves the load; at most every two seconds), when the
minute turns (the window moves on), and on ``g``; never while hidden, and never over a load
still waiting for its answer, as the Cluster view.
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import datetime
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Label, Static

from nats_scheduler.admin.api import LoadAhead
from nats_scheduler.admin.load import herd_text
from nats_scheduler.core import events as ev

from ..widgets.heat_strip import HeatStrip
from ..widgets.minute_bars import MinuteBars, hour_ahead
from ..widgets.steady import update_changed
from ..widgets.top_bar import TopBar
from .one_answer import OneAnswerScreen

HOURS = 24
HERDS_SHOWN = 3


def summary_text(load: LoadAhead | None) -> Text:
    """The window in figures: the next hour, the day, and what a herd is here."""
    if load is None:
        return Text("Asking the scheduler for the load ahead…", style="dim")
    hour = hour_ahead(load)
    day = sum(m.due for m in load.minutes)
    peak = max(load.minutes, key=lambda m: (m.due, -m.minute.timestamp()), default=None)
    text = Text.assemble(("Next hour ", "bold"), f"{sum(m.due for m in hour):,} due · ",
                         ("next 24 h ", "bold"), f"{day:,} due")
    if peak is not None:
        text.append(f" · busiest {peak.minute:%H:%M} UTC ({peak.due:,})")
    if load.capacity is None:
        text.append("  (no scheduler process answered: herds not judged)", style="dim")
    else:
        replicas = load.replicas or 1
        text.append(f"\nA herd: more than {load.capacity:,} due in a minute, what {replicas} "
                    f"live replica{'' if replicas == 1 else 's'} start within "
                    f"{load.lateness:g} s at the measured {load.rate:,.0f} a second each",
                    style="dim")
    return text


def herds_text(load: LoadAhead | None) -> Text:
    """The herd minutes, the busiest first (a few, and how many more)."""
    if load is None:
        return Text("")
    herds = load.herds()
    if not herds:
        return Text("No herd minute in the next 24 h.", style="green")
    text = Text()
    for minute in herds[:HERDS_SHOWN]:
        text.append("▲ " + herd_text(minute, load) + "\n", style="bold red")
    if len(herds) > HERDS_SHOWN:
        text.append(f"… and {len(herds) - HERDS_SHOWN} more herd minutes "
                    "(nats-scheduler schedules --load lists them all)", style="red")
    text.rstrip()
    return text


def _minute(instant: datetime) -> datetime:
    return instant.replace(second=0, microsecond=0)


class LoadScreen(OneAnswerScreen):
    """Key ``4``. See the module docstring."""

    min_reload_interval = 2.0
    BINDINGS: ClassVar[list[BindingType]] = [Binding("g", "refresh", "Refresh")]

    asking = "Loading the load ahead"

    def __init__(self) -> None:
        super().__init__(id="load-screen")
        self.load: LoadAhead | None = None
        self._asked_minute: datetime | None = None
        """The console's minute when the load shown was asked for (the window moves on)."""

    def compose(self) -> ComposeResult:
        yield TopBar("Load ahead: scheduled Runs due per minute", tab="load")
        yield Static(summary_text(None), id="load-summary")
        yield Label("The next hour, minute by minute", classes="section-title")
        yield MinuteBars(id="load-hour")
        yield Label("The next 24 hours: a cell per minute, two hours a row (upper half, "
                    "lower half)", classes="section-title")
        yield HeatStrip(id="load-day")
        yield Static("", id="load-herds")
        yield Footer()

    # ------------------------------------------------------------------ data

    def absorb(self, event: object) -> set[str | None]:
        return {None} if isinstance(event, ev.ScheduleEvent) else set()

    def reload(self, dirty: set[str | None] | None) -> None:
        self._asked_minute = _minute(self.console.clock.now())
        super().reload(dirty)

    def ask(self) -> Awaitable[object]:
        return self.console.backend.load_ahead(HOURS)

    def answered(self, answer: object) -> None:
        assert isinstance(answer, LoadAhead)
        self.load = answer
        self.repaint()

    def _tick(self) -> None:
        """The 1 s repaint; once the minute has turned since the last load, a reload."""
        super()._tick()
        minute = _minute(self.console.clock.now())
        if self.shown and self._asked_minute is not None and minute > self._asked_minute:
            self._asked_minute = minute  # asked once per minute turned
            self.request_reload({None})

    # ------------------------------------------------------------------ drawing

    def repaint(self) -> None:
        update_changed(self.query_one("#load-summary", Static), summary_text(self.load))
        self.query_one(MinuteBars).show(self.load)
        self.query_one(HeatStrip).show(self.load)
        update_changed(self.query_one("#load-herds", Static), herds_text(self.load))

    def action_refresh(self) -> None:
        self.reload(None)
